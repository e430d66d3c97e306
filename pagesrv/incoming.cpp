#include "incoming.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "criu/criu_config.hpp"
#include "criu/criu_deadlines.hpp"
#include "criu/criu_image.hpp"
#include "criu/criu_rpc.hpp"
#include "daemon.hpp"
#include "engine_request.hpp"
#include "engine_restore.hpp"
#include "pool/pool_layout.hpp"
#include "sys/proc.hpp"
#include "sys/subprocess.hpp"
#include "transport/fabric.hpp"
#include "wire/control.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace ferry::pagesrv {

namespace {

constexpr auto control_timeout = std::chrono::seconds(30);
// Between two frames of images from the migrator.
constexpr auto images_timeout = std::chrono::minutes(4);
constexpr auto lazy_ready_timeout = std::chrono::seconds(30);

bool valid_migration_id(const std::string& id) {
    return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

bool safe_image_name(const std::string& name) {
    return !name.empty() && name.size() < 256 && name.find('/') == std::string::npos &&
           name != "." && name != ".." && name != "lazy-pages.socket";
}

// The lazy-pages binary: $FERRY_LAZY_PAGES, beside pagesrv once installed,
// or in the build tree.
std::string lazy_pages_binary() {
    if (const char* env = std::getenv("FERRY_LAZY_PAGES"); env && *env)
        return env;
    for (auto candidate :
         {proc::self_dir() / "lazy-pages", proc::self_dir() / ".." / "lazy-pages" / "lazy-pages"})
        if (std::filesystem::exists(candidate))
            return candidate.string();
    throw error("cannot find the lazy-pages binary (set FERRY_LAZY_PAGES)");
}

// A running lazy-pages child and the sockets it reports on.
struct lazy_child {
    pid_t pid = -1;
    unique_fd report; // control frames from the child
    unique_fd keeper; // duplicates of the restored tasks' uffds
    std::vector<unique_fd> held_uffds;

    ~lazy_child() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
    }
    int wait() {
        int status = 0;
        if (pid > 0 && ::waitpid(pid, &status, 0) == pid)
            pid = -1;
        return status;
    }
    void take_uffds() {
        for (;;) {
            pollfd p{keeper.get(), POLLIN, 0};
            if (::poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
                return;
            try {
                held_uffds.push_back(net::recv_fd(keeper.get()));
            } catch (const std::exception&) {
                return; // the child closed its end
            }
        }
    }
};

class incoming_session {
  public:
    incoming_session(daemon& d, int fd, const FerryControl__IncomingPrepare& prepare)
        : _d(d), _fd(fd), _id(prepare.migration_id),
          _source(prepare.source_addr ? prepare.source_addr : ""),
          _fabric(prepare.fabric && *prepare.fabric ? prepare.fabric : "tcp"),
          _pool(prepare.pool ? prepare.pool : ""), _engine(prepare.engine ? prepare.engine : ""),
          _container(prepare.container_name ? prepare.container_name : ""),
          _container_image(prepare.container_image ? prepare.container_image : ""),
          _container_config(prepare.has_container_config
                                ? std::vector<uint8_t>(prepare.container_config.data,
                                                       prepare.container_config.data +
                                                           prepare.container_config.len)
                                : std::vector<uint8_t>()),
          _log(make_logger("pagesrv")) {
        const double scale =
            prepare.has_deadline_scale && prepare.deadline_scale > 0 ? prepare.deadline_scale : 1.0;
        _deadlines = criu::deadlines::for_memory(
            prepare.has_workload_bytes ? prepare.workload_bytes : 0, scale);
        const auto method =
            d.criu_stop_method(prepare.has_no_hw_breakpoints && prepare.no_hw_breakpoints);
        if (!method.criu_env.empty())
            _criu_env.push_back(method.criu_env);
    }

    // A container reserved here that never ran is removed; one that runs
    // is the engine's. The plugin's moments of this migration are done with.
    ~incoming_session() {
        if (_engine_restore && _resumed)
            _engine_restore->release();
        else if (_engine_restore)
            _engine_restore->remove();
        _d.criu_events().forget(_id);
    }

    void run();
    // Once the session is over the images are of no use; the logs stay.
    // The reservation record too, until the session ends.
    void discard_images() noexcept;

  private:
    void prepare();
    void check_prepare();
    bool receive_images();
    bool start_lazy_pages();
    bool restore();
    bool restore_with_engine();
    bool engine_restore_failed(const std::string& why, bool tasks_ran);
    void report_resumed(uint64_t restore_ns, std::optional<uint64_t> engine_settle_ns);
    void spawn_lazy_pages();
    void relay_transfer();
    std::optional<std::string> lazy_report_before_resume();
    bool ask_to_resume();
    bool cancel_restore(criu::service& criu, const std::string& why);
    void send_restore_failure(const std::string& why);
    void kill_restored(const std::string& why);

    daemon& _d;
    int _fd;
    std::string _id;
    std::string _source;
    std::string _fabric;
    std::string _pool;               // pool mode: the pool_spec lazy-pages reads from
    std::string _engine, _container; // a container, restored through its engine
    std::string _container_image;
    std::vector<uint8_t> _container_config;
    std::unique_ptr<engines::engine_restore> _engine_restore;
    std::shared_ptr<spdlog::logger> _log;
    std::filesystem::path _dir;
    lazy_child _lazy;
    std::optional<criu::service> _criu; // started at prepare, used for the restore
    pid_t _root_pid = -1;
    bool _resumed = false;
    criu::deadlines _deadlines;         // the restore's, grown with the workload
    std::vector<std::string> _criu_env; // CRIU_FAULT=130 where breakpoints do not trap
    uint64_t _images_check_ns = 0;
    uint64_t _lazy_start_ns = 0;
};

void incoming_session::send_restore_failure(const std::string& why) {
    _log->error("migration {}: {}", _id, why);
    FerryControl__RestoreResult r = FERRY_CONTROL__RESTORE_RESULT__INIT;
    r.ok = false;
    r.error = const_cast<char*>(why.c_str());
    try {
        control::send_message(_fd, r, net::after(control_timeout));
    } catch (const std::exception&) {
    }
}

void incoming_session::kill_restored(const std::string& why) {
    if (_root_pid <= 0)
        return;
    // Fail-stop: tasks whose pages cannot be served must not run on zeros.
    _log->error("migration {}: killing the restored tree (root pid {}): {}", _id, _root_pid, why);
    ::kill(_root_pid, SIGKILL);
}

// Refusals go back to the migrator as an error frame, before the source freezes.
void incoming_session::prepare() {
    try {
        check_prepare();
    } catch (const std::exception& e) {
        try {
            control::send_error(_fd, e.what(), net::after(control_timeout));
        } catch (const std::exception&) {
        }
        throw;
    }
    // The helpers start now, before the source freezes.
    spawn_lazy_pages();
    if (_engine.empty()) {
        // Ferry's CRIU plugin tags its reports with the migration id.
        auto env = _criu_env;
        env.push_back("FERRY_MIGRATION_ID=" + _id);
        _criu.emplace(criu::service::start(env));
    }
    FerryControl__PrepareOk ok = FERRY_CONTROL__PREPARE_OK__INIT;
    ok.criu_version = const_cast<char*>(_d.criu_version().c_str());
    control::send_message(_fd, ok, net::after(control_timeout));
}

void incoming_session::check_prepare() {
    if (!valid_migration_id(_id))
        throw error(fmt::format("'{}' is not a migration id", _id));
    (void)fabric_spec::parse(_fabric);
    if (!_pool.empty())
        (void)pool::pool_spec::parse(_pool);
    // No source: a restore from the pool, which must hold every page.
    if (!_source.empty() || _pool.empty())
        net::parse_endpoint(_source); // validates
    _dir = _d.config().state_dir / "incoming" / _id;
    if (!std::filesystem::create_directory(_dir))
        throw error(fmt::format("migration {} already exists here", _id));
    if (!_engine.empty()) {
        _engine_restore = engines::make_engine_restore(_engine, _container);
        _engine_restore->reserve(_dir, _container_image, _container_config);
    }
}

bool incoming_session::receive_images() {
    uint64_t t0 = 0;
    for (bool last = false; !last;) {
        auto e = control::receive(_fd, net::after(images_timeout));
        if (!e) {
            _log->warn("migration {}: the migrator left before sending every image", _id);
            return false;
        }
        control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_INCOMING_IMAGES, "migrator");
        if (fault_injected(fault::dest_die_before_restore)) {
            _log->warn("fault injection: dying before restore");
            ::raise(SIGKILL);
        }
        if (!t0)
            t0 = monotonic_ns();
        const auto& images = *e->incoming_images;
        last = images.has_last && images.last;
        for (size_t i = 0; i < images.n_files; i++) {
            const auto& f = *images.files[i];
            if (!safe_image_name(f.name)) {
                send_restore_failure(fmt::format("refusing image file name '{}'", f.name));
                return false;
            }
            if (buffer_checksum(f.data.data, f.data.len) != f.xxh64) {
                send_restore_failure(fmt::format("image {} is corrupt: checksum mismatch", f.name));
                return false;
            }
            const uint64_t offset = f.has_offset ? f.offset : 0;
            std::fstream out(_dir / f.name, std::ios::binary | std::ios::out |
                                                (offset ? std::ios::in : std::ios::trunc));
            out.seekp(std::streamoff(offset));
            out.write(reinterpret_cast<const char*>(f.data.data), std::streamsize(f.data.len));
            if (!out)
                throw error(fmt::format("cannot write {}", (_dir / f.name).string()));
        }
    }
    try {
        (void)criu::image_set::load(_dir);
    } catch (const criu::image_error& ex) {
        send_restore_failure(fmt::format("the images are corrupt: {}", ex.what()));
        return false;
    }
    if (fault_injected(fault::restore_fail)) {
        // Break an image CRIU needs but Ferry does not read.
        for (const auto& entry : std::filesystem::directory_iterator(_dir))
            if (entry.path().filename().string().rfind("core-", 0) == 0)
                std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << "garbage";
    }
    _images_check_ns = monotonic_ns() - t0;
    return true;
}

// Started while the source is still running, so that neither exec nor
// set-up falls inside the downtime; it waits for lazy_start.
void incoming_session::spawn_lazy_pages() {
    int report[2], keeper[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, report) ||
        ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, keeper))
        throw sys_error("socketpair");
    unique_fd report_ours(report[0]), report_theirs(report[1]);
    unique_fd keeper_ours(keeper[0]), keeper_theirs(keeper[1]);
    const std::string bin = lazy_pages_binary();
    std::vector<std::string> args = {bin,
                                     "--images",
                                     _dir.string(),
                                     "--source",
                                     _source,
                                     "--migration",
                                     _id,
                                     "--report-fd",
                                     std::to_string(report_theirs.get()),
                                     "--uffd-keeper-fd",
                                     std::to_string(keeper_theirs.get()),
                                     "--wait-start",
                                     "--fabric",
                                     _fabric};
    if (!_pool.empty()) {
        args.push_back("--pool");
        args.push_back(_pool);
    }
    // Extra options for tuning experiments, e.g. FERRY_LAZY_PAGES_ARGS="--window 16".
    if (const char* extra = std::getenv("FERRY_LAZY_PAGES_ARGS"); extra && *extra) {
        std::istringstream words(extra);
        for (std::string w; words >> w;)
            args.push_back(w);
    }
    std::vector<char*> argv;
    for (const auto& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const std::string log_path = (_dir / "lazy-pages.log").string();
    pid_t pid = ::fork();
    if (pid < 0)
        throw sys_error("fork");
    if (pid == 0) {
        ::fcntl(report_theirs.get(), F_SETFD, 0);
        ::fcntl(keeper_theirs.get(), F_SETFD, 0);
        int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (log_fd >= 0)
            ::dup2(log_fd, STDERR_FILENO);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::execv(bin.c_str(), argv.data());
        ::_exit(127);
    }
    _lazy.pid = pid;
    _lazy.report = std::move(report_ours);
    _lazy.keeper = std::move(keeper_ours);
    report_theirs.reset();
    keeper_theirs.reset();
}

bool incoming_session::start_lazy_pages() {
    const uint64_t t0 = monotonic_ns();
    FerryControl__LazyStart go = FERRY_CONTROL__LAZY_START__INIT;
    try {
        control::send_message(_lazy.report.get(), go, net::after(control_timeout));
    } catch (const std::exception& ex) {
        send_restore_failure(fmt::format("lazy-pages is gone: {}", ex.what()));
        return false;
    }
    auto e = control::receive(_lazy.report.get(), net::after(lazy_ready_timeout));
    if (e && e->body_case == FERRY_CONTROL__ENVELOPE__BODY_LAZY_READY) {
        _lazy_start_ns = monotonic_ns() - t0;
        return true;
    }
    std::string why = "lazy-pages exited before it was ready";
    if (e && e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_STATS &&
        e->transfer_stats->error)
        why = fmt::format("lazy-pages failed: {}", e->transfer_stats->error);
    send_restore_failure(why);
    return false;
}

bool incoming_session::restore() {
    if (_engine_restore)
        return restore_with_engine();
    const uint64_t t0 = monotonic_ns();
    unique_fd dir(::open(_dir.c_str(), O_DIRECTORY | O_CLOEXEC));
    if (!dir)
        throw sys_error("open " + _dir.string());
    CriuOpts opts = CRIU_OPTS__INIT;
    opts.images_dir_fd = dir.get();
    opts.has_work_dir_fd = true;
    opts.work_dir_fd = dir.get();
    opts.log_file = const_cast<char*>("restore.log");
    opts.has_log_level = true;
    opts.log_level = 4;
    opts.has_lazy_pages = true;
    opts.lazy_pages = true;
    opts.has_notify_scripts = true;
    opts.notify_scripts = true;
    const auto config =
        criu::write_config(_dir / "criu-restore.conf", criu::restore_options).string();
    opts.config_file = const_cast<char*>(config.c_str());
    CriuReq req = CRIU_REQ__INIT;
    req.type = CRIU_REQ_TYPE__RESTORE;
    req.opts = &opts;

    criu::service& criu = *_criu;
    criu.send(req);
    const std::string log_hint = (_dir / "restore.log").string();
    const auto until = net::after(_deadlines.restore);
    for (;;) {
        // Watch lazy-pages too: if it dies during restore, the restored
        // tasks would block on their first fault and CRIU with them.
        pollfd fds[2] = {{criu.fd(), POLLIN, 0}, {_lazy.report.get(), POLLIN, 0}};
        if (::poll(fds, 2, 1000) < 0 && errno != EINTR)
            throw sys_error("poll restore");
        _lazy.take_uffds();
        if (std::chrono::steady_clock::now() > until)
            return cancel_restore(criu, "restore did not finish in time");
        if (fds[1].revents) {
            auto e = lazy_report_before_resume();
            if (e)
                return cancel_restore(criu, *e);
        }
        if (!fds[0].revents)
            continue;
        auto r = criu.receive(net::after(_deadlines.notify));
        if (r->type != CRIU_REQ_TYPE__NOTIFY) {
            if (r->success)
                return true;
            send_restore_failure(criu::describe_failure(*r, log_hint));
            return false;
        }
        const std::string script = r->notify && r->notify->script ? r->notify->script : "";
        bool ok = true;
        if (script == "post-restore") {
            // The tasks are restored but have not run. This is the last
            // notification whose failure makes CRIU kill them (a failed
            // pre-resume is only logged), so it is the commit gate: ask the
            // migrator whether the source is ready to stay frozen for good.
            if (r->notify->has_pid)
                _root_pid = r->notify->pid;
            ok = ask_to_resume();
        } else if (script == "post-resume") {
            report_resumed(monotonic_ns() - t0, std::nullopt);
        }
        criu.ack_notify(ok);
    }
}

// The engine restores; CRIU inside it asks the gate (the shim, as CRIU's
// post-restore action script) before the tasks run, as in restore() above.
bool incoming_session::restore_with_engine() {
    const uint64_t t0 = monotonic_ns();
    std::vector<std::string> command;
    try {
        command = _engine_restore->prepare(_dir, _id, _criu_env);
    } catch (const std::exception& ex) {
        return engine_restore_failed(ex.what(), false);
    }
    unique_fd gate = engines::listen_gate(_dir);
    auto engine_cmd = child_process::spawn(command, _dir / (_engine + "-restore.log"));
    bool gated = false, resume = false;
    uint64_t t_resume = 0;
    const auto until = net::after(_deadlines.restore);
    for (;;) {
        // Once answered, the gate is not watched; once the tasks resumed,
        // lazy-pages' reports wait for relay_transfer().
        pollfd fds[3] = {{gated ? -1 : gate.get(), POLLIN, 0},
                         {engine_cmd.exit_fd(), POLLIN, 0},
                         {resume ? -1 : _lazy.report.get(), POLLIN, 0}};
        if (::poll(fds, 3, 1000) < 0 && errno != EINTR)
            throw sys_error("poll engine restore");
        _lazy.take_uffds();
        if (std::chrono::steady_clock::now() > until) {
            engine_cmd.signal(SIGKILL);
            (void)engine_cmd.wait_for(std::chrono::seconds(10));
            return engine_restore_failed("the engine did not restore in time", resume);
        }
        if (fds[2].revents) {
            if (auto e = lazy_report_before_resume()) {
                engine_cmd.signal(SIGKILL);
                (void)engine_cmd.wait_for(std::chrono::seconds(10));
                return engine_restore_failed(*e, false);
            }
        }
        if (fds[0].revents) {
            unique_fd conn(::accept4(gate.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!conn)
                continue;
            gated = true;
            try {
                _root_pid = engines::read_gate_request(conn.get());
                resume = ask_to_resume();
            } catch (const std::exception& ex) {
                _log->warn("migration {}: {}", _id, ex.what());
            }
            engines::answer_gate(conn.get(), resume, resume ? "" : "not committed");
            t_resume = monotonic_ns();
        }
        if (!fds[1].revents)
            continue;
        const auto status = engine_cmd.wait_for(std::chrono::milliseconds(0));
        if (!status)
            continue;
        const bool ok = WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
        if (!ok)
            return engine_restore_failed(fmt::format("{}'s restore failed ({}): {}", _engine,
                                                     describe_wait_status(*status),
                                                     engine_cmd.log_tail()),
                                         resume);
        if (!resume)
            // Restored without asking the gate: the engine did not run Ferry's shim.
            return engine_restore_failed(
                fmt::format("{} restored without Ferry's runc shim (is its runtime ferry-runc?)",
                            _engine),
                true);
        if (const pid_t p = _engine_restore->container_pid(); p > 0)
            _root_pid = p;
        report_resumed(t_resume - t0, monotonic_ns() - t_resume);
        return true;
    }
}

// The tasks run: tell the migrator, with the destination's phases.
void incoming_session::report_resumed(uint64_t restore_ns,
                                      std::optional<uint64_t> engine_settle_ns) {
    _resumed = true;
    FerryControl__RestoreResult res = FERRY_CONTROL__RESTORE_RESULT__INIT;
    res.ok = true;
    res.has_root_pid = true;
    res.root_pid = _root_pid;
    res.has_images_check_ns = true;
    res.images_check_ns = _images_check_ns;
    res.has_lazy_start_ns = true;
    res.lazy_start_ns = _lazy_start_ns;
    res.has_criu_restore_ns = true;
    res.criu_restore_ns = restore_ns;
    res.has_engine_settle_ns = engine_settle_ns.has_value();
    res.engine_settle_ns = engine_settle_ns.value_or(0);
    FerryControl__CriuMoments moments;
    _d.criu_events().moments(_id).to_message(moments);
    res.moments = &moments;
    try {
        control::send_message(_fd, res, net::after(control_timeout));
    } catch (const std::exception& ex) {
        _log->warn("migration {}: cannot report the resume: {}", _id, ex.what());
    }
}

// Before the migrator hears of a resume, the source can take over again, so
// nothing of the destination's copy may keep running.
bool incoming_session::engine_restore_failed(const std::string& why, bool tasks_ran) {
    if (tasks_ran && _root_pid > 0)
        ::kill(_root_pid, SIGKILL);
    _engine_restore->remove();
    send_restore_failure(why);
    return false;
}

bool incoming_session::ask_to_resume() {
    std::string refusal = "the migrator went away";
    try {
        FerryControl__ResumeRequest ask = FERRY_CONTROL__RESUME_REQUEST__INIT;
        control::send_message(_fd, ask, net::after(control_timeout));
        auto d = control::receive(_fd, net::after(control_timeout));
        if (d && d->body_case == FERRY_CONTROL__ENVELOPE__BODY_RESUME_DECISION) {
            if (d->resume_decision->resume && !fault_injected(fault::dest_fail_after_commit))
                return true;
            refusal = d->resume_decision->reason ? d->resume_decision->reason : "refused";
        }
    } catch (const std::exception& ex) {
        refusal = ex.what();
    }
    _log->warn("migration {}: resume refused ({}); CRIU kills the restored tasks", _id, refusal);
    return false;
}

// A message from lazy-pages while restore runs. Returns a failure reason if
// lazy-pages failed or died; progress reports are dropped.
std::optional<std::string> incoming_session::lazy_report_before_resume() {
    control::envelope_ptr e;
    try {
        e = control::receive(_lazy.report.get(), net::after(control_timeout));
    } catch (const std::exception& ex) {
        return fmt::format("lazy-pages report channel: {}", ex.what());
    }
    if (!e)
        return std::string("lazy-pages died during restore");
    if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_STATS)
        return fmt::format("lazy-pages failed during restore: {}",
                           e->transfer_stats->error ? e->transfer_stats->error : "unknown error");
    return std::nullopt;
}

// Stops a restore that cannot succeed: the tasks it created are killed, so
// none of them can run without its pages.
bool incoming_session::cancel_restore(criu::service& criu, const std::string& why) {
    proc::kill_descendants(criu.pid());
    criu.kill();
    if (_root_pid > 0)
        ::kill(_root_pid, SIGKILL);
    send_restore_failure(why);
    return false;
}

// After the resume: forward lazy-pages' progress to the migrator until it
// reports its final statistics, holding the uffd duplicates meanwhile.
void incoming_session::relay_transfer() {
    std::optional<std::string> failure;
    for (;;) {
        pollfd fds[2] = {{_lazy.report.get(), POLLIN, 0}, {_lazy.keeper.get(), POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            throw sys_error("poll lazy-pages");
        }
        if (fds[1].revents)
            _lazy.take_uffds();
        if (!fds[0].revents)
            continue;
        control::envelope_ptr e;
        try {
            e = control::receive(_lazy.report.get(), net::after(control_timeout));
        } catch (const std::exception& ex) {
            failure = fmt::format("lazy-pages report channel: {}", ex.what());
        }
        if (!e) {
            failure = failure.value_or("lazy-pages died without reporting");
            break;
        }
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_PROGRESS) {
            try {
                control::send(_fd, *e, net::after(control_timeout));
            } catch (const std::exception&) {
                // Progress is informational; the transfer goes on without the migrator.
            }
            continue;
        }
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_STATS) {
            const int status = _lazy.wait();
            if (!e->transfer_stats->ok)
                failure = e->transfer_stats->error ? e->transfer_stats->error : "lazy-pages failed";
            else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                failure = "lazy-pages reported success but exited abnormally";
            if (failure)
                kill_restored(*failure);
            try {
                control::send(_fd, *e, net::after(control_timeout));
            } catch (const std::exception&) {
            }
            break;
        }
    }
    if (failure && _lazy.pid > 0) {
        kill_restored(*failure);
        FerryControl__TransferStats t = FERRY_CONTROL__TRANSFER_STATS__INIT;
        t.ok = false;
        t.error = const_cast<char*>(failure->c_str());
        try {
            control::send_message(_fd, t, net::after(control_timeout));
        } catch (const std::exception&) {
        }
    }
    // Every page is in place (or the tree is dead): release the uffds, or
    // the tasks would block on their next non-cooperative event.
    _lazy.held_uffds.clear();
    _log->info("migration {}: transfer {}", _id, failure ? "failed: " + *failure : "complete");
}

void incoming_session::discard_images() noexcept {
    std::error_code ec;
    if (_dir.empty())
        return;
    // The reservation record goes with the container it names (see
    // ~incoming_session), not with the images.
    for (const auto& entry : std::filesystem::directory_iterator(_dir, ec))
        if (entry.path().extension() != ".log" &&
            entry.path().filename() != engines::reservation_file)
            std::filesystem::remove(entry.path(), ec);
}

void incoming_session::run() {
    prepare();
    _log->info("migration {}: incoming from source {}", _id, _source);
    if (!receive_images() || !start_lazy_pages())
        return;
    if (!restore()) {
        if (_resumed)
            kill_restored("restore reported failure after the tasks resumed");
        return;
    }
    _log->info("migration {}: resumed as pid {}", _id, _root_pid);
    relay_transfer();
}

} // namespace

void serve_incoming(daemon& d, int fd, const FerryControl__IncomingPrepare& prepare) {
    incoming_session session(d, fd, prepare);
    try {
        session.run();
    } catch (...) {
        session.discard_images();
        throw;
    }
    session.discard_images();
}

} // namespace ferry::pagesrv
