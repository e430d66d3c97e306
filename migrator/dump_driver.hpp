// Who runs the source's lazy dump. For a bare process tree Ferry speaks CRIU's
// RPC itself (criu_dump); under a container engine the engine's own checkpoint
// runs it, made lazy by Ferry's runc shim (podman_dump). Either way CRIU
// freezes the tasks, writes every image but lazy page contents, and keeps
// them frozen with its page server on 127.0.0.1:port until CLOSE or an abort.
#pragma once

#include "migrate.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ferry::migrator {

// A file the destination needs besides CRIU's images (an engine's config,
// a container's writable-layer changes). Sent as "engine.<name>".
struct engine_file {
    std::string name;
    std::vector<uint8_t> data;
};

class dump_driver {
  public:
    virtual ~dump_driver() = default;
    // Starts the freeze; CRIU's page server will listen on 127.0.0.1:port.
    virtual void start(uint16_t port) = 0;
    // Until every image is written; sets r.t_freeze and r.t_dumped. Throws if
    // the dump failed (then CRIU has resumed the tasks).
    virtual void wait_dumped(migration_result& r) = 0;
    [[nodiscard]] virtual std::filesystem::path images_dir() const = 0;
    // What else the destination needs, gathered while the tasks are frozen.
    virtual std::vector<engine_file> engine_files() { return {}; }
    // While the migrator waits on something else: an fd that turns readable
    // when the dump has news (-1: none expected), and its handler, which
    // throws if the dump ended by itself.
    [[nodiscard]] virtual int event_fd() const = 0;
    virtual void on_event() = 0;
    // Until CRIU's page server listens: CLOSE and aborts go through it.
    virtual void wait_page_server() = 0;
    // After CLOSE or an abort: until the dump is over. True if it succeeded.
    virtual bool wait_end(std::chrono::seconds timeout) = 0;
    // Why the dump failed, once wait_end said so.
    [[nodiscard]] virtual std::string end_error() const = 0;
    // The dump ended by itself (it failed, and CRIU resumed the tasks).
    [[nodiscard]] virtual bool ended() const = 0;
    // Last resort when an abort cannot be delivered.
    virtual void kill() noexcept = 0;
    // After the destination has taken over and the dump has ended: removes
    // what is left of the source (a container's record). False if it could not.
    virtual bool remove_source() { return true; }
};

// Bare process tree: CRIU's RPC (criu swrk), images in `dir`.
// `criu_options`: extra lines for CRIU's config file (e.g. "tcp-close\n").
std::unique_ptr<dump_driver> make_criu_dump(pid_t pid, const std::filesystem::path& dir,
                                            const std::string& migration_id,
                                            const std::string& criu_options);

} // namespace ferry::migrator
