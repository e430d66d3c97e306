// A container's writable-layer changes, as engines' checkpoint exports carry
// them: a tar of what was added or changed, and the container paths that
// were deleted. Taken while the container is frozen, so it is exact.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ferry::migrator {

// An overlay upper dir over its lower dirs (topmost first): whiteouts and
// what opaque directories hide are the deletions. Podman, docker's overlay2.
void overlay_diff(const std::filesystem::path& upper,
                  const std::vector<std::filesystem::path>& lowers,
                  const std::filesystem::path& tar_out, std::vector<std::string>& deleted);

// A full copy of the container's tree against the tree it was copied from
// (docker's vfs driver): what differs in type, mode, owner, size, mtime,
// link target or device is changed; what is gone from `layer` is deleted.
void tree_diff(const std::filesystem::path& layer, const std::filesystem::path& base,
               const std::filesystem::path& tar_out, std::vector<std::string>& deleted);

// "a:b:c" -> {a, b, c}, as engines list overlay lower dirs.
std::vector<std::filesystem::path> split_lower_dirs(const std::string& s);

} // namespace ferry::migrator
