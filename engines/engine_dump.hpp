// A container engine's own checkpoint command as Ferry's lazy dump.
//
// Ferry leaves a checkpoint request for its runc shim (engine_request.hpp)
// and runs the engine's checkpoint; the shim adds runc's --lazy-pages,
// --page-server and --status-fd. CRIU then keeps the container frozen until
// Ferry's daemon sends CLOSE, so the engine's command lasts the whole
// migration. runc's status byte says CRIU's page server listens and every
// image is written. An abort makes CRIU resume the tasks: the engine's
// checkpoint fails and the container runs on.
//
// Engines differ in the command, where the images land, what else the
// destination needs (engine_files) and how the source container goes.
#pragma once

#include "core/unique_fd.hpp"
#include "criu/dump_driver.hpp"
#include "engine.hpp"
#include "sys/subprocess.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/logger.h>

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry::engines {

// The source_container of an engine whose description of the container is a
// `Container` (a container_info) and whose lazy dump is a `Dump` made from it.
template <typename Container, typename Dump>
class described_source : public source_container {
  public:
    described_source(Container c, host_tools tools) : _c(std::move(c)), _tools(std::move(tools)) {}
    const container_info& info() const override { return _c; }
    std::unique_ptr<criu::dump_driver> make_dump(const std::filesystem::path& dir,
                                                 const std::string& migration_id,
                                                 const criu::dump_settings& s) const override {
        return std::make_unique<Dump>(_c, dir, migration_id, s, _tools);
    }

  protected:
    Container _c;
    host_tools _tools;
};

// The engine volumes among inspect's "Mounts" (bind mounts are not).
std::vector<std::string> named_volumes(const nlohmann::json& mounts);

class engine_dump : public criu::dump_driver {
  public:
    engine_dump(std::string engine, const container_info& c, std::filesystem::path dir,
                std::string migration_id, criu::dump_settings settings, host_tools tools);
    ~engine_dump() override;

    void start(uint16_t port) override;
    std::vector<criu::engine_file> wait_held(std::chrono::milliseconds bound) override;
    void release_hold() override;
    bool refuse_hold(std::chrono::milliseconds bound) noexcept override;
    criu::dump_times wait_dumped() override;
    [[nodiscard]] int event_fd() const override;
    void on_event() override;
    void wait_page_server(std::chrono::milliseconds bound) override;
    [[nodiscard]] bool page_server_ready() const override { return _status_ready; }
    bool wait_end(std::chrono::milliseconds bound) override;
    [[nodiscard]] std::string end_error() const override { return _end_error; }
    [[nodiscard]] bool ended() const override { return _ended; }
    [[nodiscard]] bool stuck() const override { return _stuck; }
    void after_criu_killed() noexcept override;
    bool remove_source() final;

  protected:
    // Removes the source container through its engine; throws on failure.
    virtual void remove_container() = 0;
    // The writable layer's changes as the destination applies them:
    // `diff(tar, deleted, progress)` writes what was added or changed and
    // lists what was deleted, calling `progress` as the tar grows (the
    // migrator's heartbeat goes from there: a large layer takes long,
    // frozen); with the container's /dev/shm if `shm` is a directory.
    using layer_diff =
        std::function<void(const std::filesystem::path& tar, std::vector<std::string>& deleted,
                           const std::function<void()>& progress)>;
    [[nodiscard]] std::vector<criu::engine_file>
    writable_layer_files(const layer_diff& diff, const std::filesystem::path& shm) const;

    // The engine's checkpoint of the container, which runs runc checkpoint.
    [[nodiscard]] virtual std::vector<std::string> checkpoint_command() const = 0;
    // Where CRIU should write the images instead of where the engine says
    // (empty: where the engine says).
    [[nodiscard]] virtual std::filesystem::path redirected_images() const { return {}; }
    // The container's configuration as the engine's checkpoint wrote it
    // before its runc started, from which the destination starts a warm
    // restore (runc's descriptors.json is added to it). The engine may keep
    // what it read for engine_files, inside the freeze.
    [[nodiscard]] virtual std::vector<criu::engine_file> configuration_before_freeze() {
        return {};
    }
    [[nodiscard]] virtual bool holds_before_freeze() const { return false; }
    // Where runc and CRIU log, for a person to look at.
    [[nodiscard]] virtual std::string log_hint() const = 0;
    // After CRIU was killed and the engine's checkpoint ended: brings the
    // engine's record of the container back in line with it. Never throws.
    virtual void resync_engine() noexcept {}

    const std::string _engine, _id, _name;
    const std::filesystem::path _dir;
    const std::string _migration_id;
    const criu::dump_settings _settings;
    const host_tools _tools;
    std::shared_ptr<spdlog::logger> _log;

  private:
    void wait_status(std::chrono::steady_clock::time_point until, const char* what);

    unique_fd _status;
    unique_fd _hold_listen, _hold_conn; // while the shim holds before runc
    std::string _held_descriptors;      // runc's descriptors.json, from the shim
    child_process _cmd;
    uint64_t _t_start = 0;
    bool _status_ready = false;
    bool _stuck = false;
    bool _ended = false;
    bool _succeeded = false;
    std::string _end_error;
};

} // namespace ferry::engines
