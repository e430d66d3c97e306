// The lazy dump of a bare process tree, through CRIU's RPC: Ferry answers
// CRIU's notifications itself, so it sees the freeze (pre-dump), the images
// complete (post-dump) and the page server up (status-ready) exactly.
#include "clock.hpp"
#include "criu_rpc.hpp"
#include "dump_driver.hpp"
#include "engine_request.hpp"
#include "error.hpp"
#include "unique_fd.hpp"

#include <fcntl.h>
#include <stdlib.h>

#include <optional>

namespace ferry::migrator {

namespace {

constexpr auto notify_timeout = std::chrono::seconds(30);
constexpr auto dump_timeout = std::chrono::minutes(5);

class criu_dump final : public dump_driver {
  public:
    criu_dump(pid_t pid, std::filesystem::path dir, std::string id, std::string criu_options)
        : _pid(pid), _dir(std::move(dir)), _id(std::move(id)),
          _criu_options(std::move(criu_options)) {}

    void start(uint16_t port) override {
        _dir_fd.reset(::open(_dir.c_str(), O_DIRECTORY | O_CLOEXEC));
        if (!_dir_fd)
            throw sys_error("open " + _dir.string());
        CriuPageServerInfo ps = CRIU_PAGE_SERVER_INFO__INIT;
        ps.address = const_cast<char*>("127.0.0.1");
        ps.has_port = true;
        ps.port = port;
        CriuOpts opts = CRIU_OPTS__INIT;
        opts.images_dir_fd = _dir_fd.get();
        opts.has_pid = true;
        opts.pid = _pid;
        opts.log_file = const_cast<char*>("dump.log");
        opts.has_log_level = true;
        opts.log_level = 4;
        opts.has_lazy_pages = true;
        opts.lazy_pages = true;
        opts.ps = &ps;
        opts.has_notify_scripts = true;
        opts.notify_scripts = true;
        // Ferry's CRIU plugin tags its reports with the migration id.
        const auto config =
            engine::write_criu_config(_dir / "criu-dump.conf", _criu_options).string();
        opts.config_file = const_cast<char*>(config.c_str());
        ::setenv("FERRY_MIGRATION_ID", _id.c_str(), 1);
        CriuReq req = CRIU_REQ__INIT;
        req.type = CRIU_REQ_TYPE__DUMP;
        req.opts = &opts;
        _criu.emplace(criu::service::start());
        _criu->send(req);
    }

    void wait_dumped(migration_result& r) override {
        for (;;) {
            auto resp = _criu->receive(net::after(dump_timeout));
            if (resp->type != CRIU_REQ_TYPE__NOTIFY) {
                _ended = true;
                throw error(criu::describe_failure(*resp, log_path()));
            }
            const std::string script =
                resp->notify && resp->notify->script ? resp->notify->script : "";
            if (script == "pre-dump")
                r.t_freeze = monotonic_ns(); // CRIU seizes the tasks right after this
            _criu->ack_notify(true);
            if (script == "post-dump") {
                r.t_dumped = monotonic_ns();
                return;
            }
        }
    }

    std::filesystem::path images_dir() const override { return _dir; }

    int event_fd() const override { return _status_ready || !_criu ? -1 : _criu->fd(); }

    // One notification after post-dump, answered at once; the one that
    // matters is status-ready. A final response means the dump ended early.
    void on_event() override {
        auto r = _criu->receive(net::after(notify_timeout));
        if (r->type != CRIU_REQ_TYPE__NOTIFY) {
            _ended = true;
            throw error("CRIU ended the dump before its page server was ready: " +
                        criu::describe_failure(*r, log_path()));
        }
        _criu->ack_notify(true);
        if (r->notify && r->notify->script && std::string(r->notify->script) == "status-ready")
            _status_ready = true;
    }

    void wait_page_server() override {
        while (!_status_ready)
            on_event();
    }

    bool wait_end(std::chrono::seconds timeout) override {
        if (!_criu)
            return _succeeded;
        for (;;) {
            auto r = _criu->receive(net::after(timeout));
            if (r->type == CRIU_REQ_TYPE__NOTIFY) {
                _criu->ack_notify(true);
                continue;
            }
            _ended = true;
            _succeeded = r->success;
            if (!r->success)
                _end_error = criu::describe_failure(*r, log_path());
            break;
        }
        _criu->wait();
        _criu.reset();
        return _succeeded;
    }

    std::string end_error() const override { return _end_error; }
    bool ended() const override { return _ended; }

    void kill() noexcept override {
        if (_criu)
            _criu->kill();
        _criu.reset();
    }

  private:
    std::string log_path() const { return (_dir / "dump.log").string(); }

    pid_t _pid;
    std::filesystem::path _dir;
    std::string _id;
    std::string _criu_options;
    unique_fd _dir_fd;
    std::optional<criu::service> _criu;
    bool _status_ready = false;
    bool _ended = false;
    bool _succeeded = false;
    std::string _end_error;
};

} // namespace

std::unique_ptr<dump_driver> make_criu_dump(pid_t pid, const std::filesystem::path& dir,
                                            const std::string& migration_id,
                                            const std::string& criu_options) {
    return std::make_unique<criu_dump>(pid, dir, migration_id, criu_options);
}

} // namespace ferry::migrator
