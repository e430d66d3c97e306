// Tar archives (pax) through libarchive: what container engines exchange for
// a container's files (podman's checkpoint exports, rootfs diffs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>

struct archive;

namespace ferry {

class tar_writer {
  public:
    explicit tar_writer(const std::filesystem::path& out);
    ~tar_writer();
    tar_writer(const tar_writer&) = delete;
    tar_writer& operator=(const tar_writer&) = delete;

    // A regular file `name` holding `data`.
    void add_bytes(const std::string& name, std::span<const uint8_t> data, mode_t mode = 0600);
    // `src` as `name`, with its owner, mode and times: a directory (not its
    // contents), file, symlink, fifo or device node. Sockets are refused.
    void add_path(const std::string& name, const std::filesystem::path& src);
    // `dir`'s whole tree under `prefix` ("" for the top).
    void add_tree(const std::string& prefix, const std::filesystem::path& dir);
    void close();
    // Called after each entry and each MiB of a file's data: a long tar
    // (a container's writable layer, frozen) lets its caller show it is
    // alive, as the migrator's heartbeat must.
    void on_progress(std::function<void()> fn) { _progress = std::move(fn); }

  private:
    void progress() const {
        if (_progress)
            _progress();
    }
    std::filesystem::path _out;
    std::function<void()> _progress;
    struct archive* _a = nullptr;
};

} // namespace ferry
