// A container's writable-layer changes, as engines' checkpoint exports carry
// them: a tar of what was added or changed, and the container paths that
// were deleted. Taken while the container is frozen, so it is exact.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry::engines {

// An overlay upper dir over its lower dirs (topmost first): whiteouts and
// what opaque directories hide are the deletions. Podman, docker's overlay2.
// `progress` is called as the tar grows (tar_writer::on_progress).
void overlay_diff(const std::filesystem::path& upper,
                  const std::vector<std::filesystem::path>& lowers,
                  const std::filesystem::path& tar_out, std::vector<std::string>& deleted,
                  const std::function<void()>& progress = {});

// What a tree held when it was scanned: per path (relative), the metadata a
// change shows in. Scanned before the freeze: the tree a container was copied
// from never changes.
class tree_index {
  public:
    struct entry {
        mode_t mode = 0;
        uid_t uid = 0;
        gid_t gid = 0;
        off_t size = 0;
        timespec mtime{};
        dev_t rdev = 0;
        std::string link_target;
    };
    static tree_index scan(const std::filesystem::path& root);
    [[nodiscard]] const entry* find(const std::string& rel) const;
    [[nodiscard]] const std::unordered_map<std::string, entry>& entries() const noexcept {
        return _entries;
    }

  private:
    std::unordered_map<std::string, entry> _entries;
};

// A full copy of the container's tree against the tree it was copied from
// (docker's vfs driver): what differs in type, mode, owner, size, mtime,
// link target or device is changed; what is gone from `layer` is deleted.
void tree_diff(const std::filesystem::path& layer, const tree_index& base,
               const std::filesystem::path& tar_out, std::vector<std::string>& deleted,
               const std::function<void()>& progress = {});

// "a:b:c" -> {a, b, c}, as engines list overlay lower dirs.
std::vector<std::filesystem::path> split_lower_dirs(const std::string& s);

} // namespace ferry::engines
