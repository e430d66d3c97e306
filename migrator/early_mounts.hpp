// The container's mount namespace as CRIU dumps it before the freeze
// (`mnt-early`, criu-patches/0030: <images>/mnt-early), sent to the
// destination the moment CRIU has written it. The destination's waiting
// restore builds the mount tree from it while the source freezes and dumps,
// and uses that tree only if the final images hold the same files.
#pragma once

#include "core/unique_fd.hpp"
#include "criu/dump_driver.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace ferry::migrator {

class early_mounts_sender {
  public:
    using send_fn = std::function<void(const std::vector<criu::engine_file>&)>;
    // Watches `images_dir` (inotify) from now until stop(); `send` runs on
    // the watching thread, once, with the files.
    early_mounts_sender(std::filesystem::path images_dir, send_fn send);
    ~early_mounts_sender();
    early_mounts_sender(const early_mounts_sender&) = delete;
    early_mounts_sender& operator=(const early_mounts_sender&) = delete;

    // Stops watching at once, waits for a send in progress, and says what
    // happened (for the report). Idempotent. The inotify instance stays
    // open until the destructor, which the migration runs after the resume:
    // its close waits for an SRCU grace period (~15 ms here).
    std::string stop() noexcept;
    // When the send ended (CLOCK_MONOTONIC), 0 if none did. Read after stop().
    [[nodiscard]] uint64_t sent_at_ns() const noexcept { return _sent_at; }

  private:
    void watch() noexcept;
    bool arrived() const;
    void send_files();

    std::filesystem::path _images_dir;
    send_fn _send;
    unique_fd _inotify;
    unique_fd _wake; // an eventfd: stop() ends the watch's poll
    std::thread _thread;
    std::string _outcome = "CRIU wrote none before the dump ended";
    uint64_t _sent_at = 0;
    uint64_t _exit_at = 0;
};

} // namespace ferry::migrator
