// The lazy dump of a bare process tree, through CRIU's RPC: Ferry answers
// CRIU's notifications itself, so it sees the freeze (pre-dump), the images
// complete (post-dump) and the page server up (status-ready) exactly.
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/unique_fd.hpp"
#include "criu/criu_config.hpp"
#include "criu/criu_rpc.hpp"
#include "criu/dump_driver.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>

#include <fstream>
#include <optional>

namespace ferry::criu {

namespace {

using std::chrono::milliseconds;

// How often a wait on CRIU looks at the interrupt flag.
constexpr milliseconds interrupt_slice(200);

class rpc_dump final : public dump_driver {
  public:
    rpc_dump(pid_t pid, std::filesystem::path dir, std::string id, dump_settings settings)
        : dump_driver(settings.interrupted), _pid(pid), _dir(std::move(dir)), _id(std::move(id)),
          _settings(std::move(settings)) {}

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
        opts.log_level = _settings.log_level;
        opts.has_lazy_pages = true;
        opts.lazy_pages = true;
        opts.ps = &ps;
        opts.has_notify_scripts = true;
        opts.notify_scripts = true;
        if (_settings.network_lock_skip) {
            opts.has_network_lock = true;
            opts.network_lock = CRIU_NETWORK_LOCK_METHOD__SKIP;
        } else if (_settings.network_lock_nftables) {
            opts.has_network_lock = true;
            opts.network_lock = CRIU_NETWORK_LOCK_METHOD__NFTABLES;
        }
        const auto config =
            write_config(_dir / "criu-dump.conf", _settings.criu_options, _settings.plugin_dir)
                .string();
        opts.config_file = const_cast<char*>(config.c_str());
        CriuReq req = CRIU_REQ__INIT;
        req.type = CRIU_REQ_TYPE__DUMP;
        req.opts = &opts;
        // Ferry's CRIU plugin tags its reports with the migration id, and a
        // stuck CRIU is found by it.
        auto env = _settings.criu_env;
        env.push_back("FERRY_MIGRATION_ID=" + _id);
        _criu.emplace(service::start(_settings.criu, env));
        _criu->send(req);
    }

    dump_times wait_dumped() override {
        dump_times t;
        const auto until = std::chrono::steady_clock::now() + _settings.limits.dump;
        for (;;) {
            auto resp = next(until, "write the dump's images");
            if (resp->type != CRIU_REQ_TYPE__NOTIFY) {
                _ended = true;
                throw error(describe_failure(*resp, log_path()));
            }
            const std::string script =
                resp->notify && resp->notify->script ? resp->notify->script : "";
            _last_notify = script;
            if (script == "pre-dump")
                t.freeze = monotonic_ns(); // CRIU seizes the tasks right after this
            _criu->ack_notify(true);
            if (script == "post-dump") {
                t.dumped = monotonic_ns();
                _t_post_dump = std::chrono::steady_clock::now();
                return t;
            }
        }
    }

    std::filesystem::path images_dir() const override { return _dir; }

    int event_fd() const override { return _status_ready || !_criu || _stuck ? -1 : _criu->fd(); }

    // One notification after post-dump, answered at once; the one that
    // matters is status-ready. A final response means the dump ended early.
    void on_event() override {
        auto r = next(std::chrono::steady_clock::now() + _settings.limits.notify,
                      "answer after its notification");
        handle_after_dump(std::move(r));
    }

    void wait_page_server(milliseconds bound) override {
        if (_stuck)
            throw criu_timeout("CRIU is stuck: not waiting for its page server again");
        // The page server's own deadline runs from post-dump; `bound` can
        // only shorten it.
        auto until = std::chrono::steady_clock::now() + bound;
        if (_t_post_dump)
            until = std::min(until, *_t_post_dump + _settings.limits.page_server);
        while (!_status_ready)
            handle_after_dump(next(until, "start its page server"));
    }

    bool page_server_ready() const override { return _status_ready; }

    void answer_notifications() noexcept override {
        if (!_criu || _ended || _stuck)
            return;
        // Bounded as a whole too: the caller's own wait goes on between calls.
        const auto until = net::after(milliseconds(2000));
        try {
            while (std::chrono::steady_clock::now() < until &&
                   net::wait_readable(_criu->fd(), net::after(milliseconds(0)))) {
                auto r = _criu->receive(std::min(until, net::after(milliseconds(1000))));
                if (r->type != CRIU_REQ_TYPE__NOTIFY) {
                    end_with(*r);
                    return;
                }
                if (r->notify && r->notify->script)
                    _last_notify = r->notify->script;
                _criu->ack_notify(true);
            }
        } catch (const std::exception&) {
            // wait_end finds out
        }
    }

    bool wait_end(milliseconds bound) override {
        if (!_criu)
            return _succeeded;
        if (_stuck)
            return false;
        const auto until = std::chrono::steady_clock::now() + bound;
        while (!_ended) {
            try {
                // A notification sent before CRIU was killed (by the source
                // daemon, say) cannot be answered: that ends the wait too.
                auto r = next(until, "end its dump");
                if (r->type == CRIU_REQ_TYPE__NOTIFY) {
                    _criu->ack_notify(true);
                    continue;
                }
                end_with(*r);
            } catch (const std::exception& e) {
                _end_error = e.what();
                return false;
            }
        }
        // CRIU exits right after its answer; a bounded reap.
        _criu->reap(milliseconds(5000));
        _criu.reset();
        return _succeeded;
    }

    std::string end_error() const override { return _end_error; }
    bool ended() const override { return _ended; }
    bool stuck() const override { return _stuck; }

    std::vector<pid_t> criu_pids() const override {
        if (_criu && _criu->pid() > 0)
            return {_criu->pid()};
        return {};
    }

    void after_criu_killed() noexcept override {
        if (_criu)
            _criu->kill(); // SIGKILL again (harmless) and reap
        _criu.reset();
        _ended = true;
    }

  private:
    std::string log_path() const { return (_dir / "dump.log").string(); }

    // CRIU's final response.
    void end_with(const CriuResp& r) {
        _ended = true;
        _succeeded = r.success;
        if (!r.success)
            _end_error = describe_failure(r, log_path());
        // CRIU exits once it has answered. Reaped now, it is gone for whoever
        // waits for this migration's CRIU to end (the daemon's abort does).
        (void)_criu->reap(milliseconds(100));
    }

    // The next message from CRIU before `until`, looking at the interrupt
    // flag meanwhile. Running out marks the dump stuck.
    resp_ptr next(std::chrono::steady_clock::time_point until, const char* what) {
        for (;;) {
            if (interrupted())
                throw error("interrupted");
            const auto now = std::chrono::steady_clock::now();
            if (now >= until) {
                _stuck = true;
                throw criu_timeout(fmt::format(
                    "CRIU (pid {}) did not {} in time (after '{}'; its log ends with: {})",
                    _criu->pid(), what, _last_notify.empty() ? "start" : _last_notify,
                    last_log_line(log_path())));
            }
            if (net::wait_readable(_criu->fd(), std::min(until, now + interrupt_slice)))
                return _criu->receive(net::after(milliseconds(1000)));
        }
    }

    void handle_after_dump(resp_ptr r) {
        if (r->type != CRIU_REQ_TYPE__NOTIFY) {
            _ended = true;
            throw error("CRIU ended the dump before its page server was ready: " +
                        describe_failure(*r, log_path()));
        }
        _criu->ack_notify(true);
        if (r->notify && r->notify->script) {
            _last_notify = r->notify->script;
            if (_last_notify == "status-ready")
                _status_ready = true;
        }
    }

    pid_t _pid;
    std::filesystem::path _dir;
    std::string _id;
    dump_settings _settings;
    unique_fd _dir_fd;
    std::optional<service> _criu;
    std::optional<std::chrono::steady_clock::time_point> _t_post_dump;
    std::string _last_notify;
    bool _status_ready = false;
    bool _ended = false;
    bool _succeeded = false;
    bool _stuck = false;
    std::string _end_error;
};

} // namespace

std::string last_log_line(const std::filesystem::path& log) {
    std::ifstream in(log);
    std::string line, last;
    while (std::getline(in, line))
        if (!line.empty())
            last = line;
    if (last.size() > 200)
        last = last.substr(0, 200) + "...";
    return last.empty() ? "(nothing)" : last;
}

std::unique_ptr<dump_driver> make_rpc_dump(pid_t pid, const std::filesystem::path& dir,
                                           const std::string& migration_id,
                                           const dump_settings& settings) {
    return std::make_unique<rpc_dump>(pid, dir, migration_id, settings);
}

} // namespace ferry::criu
