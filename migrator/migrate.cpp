#include "migrate.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "criu/criu_deadlines.hpp"
#include "criu/criu_image.hpp"
#include "criu/criu_page_server.hpp"
#include "criu/criu_rpc.hpp"
#include "criu/dump_driver.hpp"
#include "criu/workload_release.hpp"
#include "engine.hpp"
#include "migration_record.hpp"
#include "park.hpp"
#include "pool/pool_client.hpp"
#include "sys/hw_breakpoints.hpp"
#include "sys/proc.hpp"
#include "wire/control.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <vector>

namespace ferry::migrator {

namespace {

constexpr auto connect_timeout = std::chrono::seconds(5);
constexpr auto control_timeout = std::chrono::seconds(30);
// Beyond the destination's own restore deadline: the images' trip and
// lazy-pages' start, before the destination reports either way.
constexpr auto restore_margin = std::chrono::seconds(60);
// How long an abort waits for CRIU's page server, through which CRIU resumes
// the tasks itself, before it kills CRIU instead.
constexpr auto abort_page_server_grace = std::chrono::seconds(5);
// The destination reports progress every 200 ms; this much silence means it is gone.
constexpr auto transfer_silence_limit = std::chrono::seconds(60);

std::atomic<bool> interrupted{false};

void check_interrupt() {
    if (interrupted.load())
        throw error("interrupted");
}

std::string new_migration_id() {
    std::random_device rd;
    std::uniform_int_distribution<uint32_t> d;
    return fmt::format("{:08x}{:08x}{:08x}{:08x}", d(rd), d(rd), d(rd), d(rd));
}

// A named volume lives in the source engine's storage; the destination
// engine would mount an empty one of that name and the data would be lost.
void refuse_named_volumes(const std::vector<std::string>& volumes) {
    if (volumes.empty())
        return;
    std::string list;
    for (const auto& v : volumes)
        list += (list.empty() ? "" : ", ") + v;
    throw error(fmt::format("the container mounts named volumes ({}), which Ferry does not move "
                            "yet; use bind mounts of storage both hosts share",
                            list));
}

// A process counts as running if it exists, is not a zombie, and is not
// stopped by a tracer (CRIU's freeze).
bool process_running(pid_t pid) {
    const auto st = proc::state(pid);
    return st && *st != 'Z' && *st != 'X' && *st != 't' && *st != 'T';
}

bool process_gone(pid_t pid) {
    const auto st = proc::state(pid);
    return !st || *st == 'Z' || *st == 'X';
}

// Image files as they travel: names and contents.
struct image_list {
    std::vector<std::string> names;
    std::vector<std::vector<uint8_t>> contents;
};

// Bytes [offset, +len) of image `i`, checksummed; points into `l`.
FerryControl__ImageFile image_piece(const image_list& l, size_t i, size_t offset, size_t len) {
    FerryControl__ImageFile f = FERRY_CONTROL__IMAGE_FILE__INIT;
    f.name = const_cast<char*>(l.names[i].c_str());
    f.data.data = const_cast<uint8_t*>(l.contents[i].data()) + offset;
    f.data.len = len;
    f.xxh64 = buffer_checksum(f.data.data, len);
    f.has_offset = true;
    f.offset = offset;
    return f;
}

class migration {
  public:
    explicit migration(const migrate_options& opt) : _opt(opt), _log(make_logger("migrator")) {
        _r.id = new_migration_id();
        _r.mode = opt.mode;
        _r.park_name = opt.park_name;
        _r.source_pid = opt.pid;
        _r.fabric = opt.fabric.to_string();
        _r.engine = opt.engine;
        _r.container = opt.container;
        if (opt.pool)
            _r.pool = opt.pool->to_string();
        _deadlines = criu::deadlines::for_memory(0, opt.deadline_scale);
    }
    ~migration() { records::remove(_r.id); }

    migration_result run();

  private:
    void check_source();
    void connect_destination(const std::string& source_addr);
    void connect_local_daemon();
    void start_dump();
    void register_with_source();
    image_list collect_images();
    void send_images(const image_list& images);
    void wait_registered();
    void park();
    void load_parked();
    void run_unpark();
    void reserve_park_name();
    void commit_source();
    bool receive_handoff();
    void wait_resumed();
    void handle_resume_request();
    void wait_transfer();
    void request_handoff();
    void handle_handoff();
    void finish_source();
    void abort_source(const std::string& reason);
    bool abort_gracefully(const std::string& reason);
    void release_source(bool end_workload);
    void tell_daemon_aborted(const std::string& reason);
    void set_phase(const char* phase);
    void cleanup();

    migrate_options _opt;
    std::shared_ptr<spdlog::logger> _log;
    migration_result _r;
    unique_fd _dest;
    unique_fd _src;
    std::unique_ptr<criu::dump_driver> _dump;
    // Container migrations: the container as its engine describes it.
    std::unique_ptr<engines::source_container> _source;
    const engines::container_info* _container = nullptr; // _source's
    std::vector<uint8_t> _container_config;              // sent with the prepare
    uint16_t _criu_port = 0;
    std::filesystem::path _dir;
    bool _dump_started = false;
    bool _registered = false;
    bool _destination_never_ran = false; // its restore failed before the tasks ran
    bool _handoff_pending = false;       // the source daemon owes an outgoing_handed_off
    parked_record _parked;               // unpark: the record being restored
    bool _record_stored = false;         // park: the record is in the pool
    criu::deadlines _deadlines;          // grown with the workload in check_source
    std::vector<std::string> _criu_env;  // for every CRIU of this migration
    bool _cgroup_was_frozen = false;
    records::migration_record _rec; // what `migrator status` shows of this migration
    bool _daemon_told_abort = false;
    bool _committing = false; // the commit was sent (or is about to be)
};

// The record `migrator status` reads. Failing to write it never fails the
// migration.
void migration::set_phase(const char* phase) {
    if (_rec.id.empty()) {
        _rec.id = _r.id;
        _rec.mode = to_string(_opt.mode);
        _rec.migrator_pid = ::getpid();
        _rec.migrator_start = proc::start_time(::getpid());
        _rec.container = _opt.container;
        _rec.engine = _opt.engine;
        _rec.destination = _opt.destination.to_string();
        _rec.local_daemon = _opt.local_daemon.to_string();
        _rec.started_unix_ms = records::now_unix_ms();
    }
    _rec.source_pid = _opt.pid;
    _rec.phase = phase;
    _rec.phase_since_unix_ms = records::now_unix_ms();
    _rec.committed = _r.committed || _committing;
    _rec.cgroup_was_frozen = _cgroup_was_frozen;
    _rec.work_dir = _dir.string();
    try {
        records::write(_rec);
    } catch (const std::exception& e) {
        _log->debug("cannot record the migration's phase: {}", e.what());
    }
}

void migration::check_source() {
    if (!_opt.engine.empty()) {
        _source = engines::find(_opt.engine).open_source(_opt.container);
        _container = &_source->info();
    }
    if (_container) {
        if (!_container->running || _container->paused || _container->pid <= 0)
            throw error(fmt::format("container '{}' is not running", _opt.container));
        refuse_named_volumes(_container->named_volumes);
        _opt.pid = _container->pid;
    }
    _r.source_pid = _opt.pid;
    const auto pids = proc::ns_pids(_opt.pid);
    if (pids.empty())
        throw error(fmt::format("no process with pid {}", _opt.pid));
    if (pids.size() < 2 || pids.back() != 1)
        throw error(fmt::format(
            "pid {} is not the init of its own PID namespace; Ferry migrates a process tree "
            "in its own PID namespace (as containers run)",
            _opt.pid));
    if (!process_running(_opt.pid))
        throw error(fmt::format("pid {} is not running (stopped, traced or a zombie)", _opt.pid));
    // A paused workload is not Ferry's to thaw, and CRIU would thaw it.
    _cgroup_was_frozen = criu::cgroup_frozen(_opt.pid);
    if (_cgroup_was_frozen)
        throw error(
            fmt::format("pid {} is in a frozen (paused) cgroup; resume it first", _opt.pid));
    for (const pid_t p : proc::tree(_opt.pid))
        _r.workload_bytes += proc::memory_bytes(p);
    _deadlines = criu::deadlines::for_memory(_r.workload_bytes, _opt.deadline_scale);
    // Whether CRIU may stop the tasks with hardware breakpoints: if they do
    // not trap here, CRIU would hang in its parasite's cure.
    const char* fault = std::getenv("CRIU_FAULT");
    const auto method =
        hw_breakpoints::decide(hw_breakpoints::probe(), _opt.no_hw_breakpoints,
                               fault ? std::optional<std::string>(fault) : std::nullopt);
    _r.criu_stop_method = method.reason;
    if (!method.criu_env.empty())
        _criu_env.push_back(method.criu_env);
    _log->debug("CRIU stops tasks by {}", method.reason);
}

// `source_addr` is empty when there is no source (a parked workload).
void migration::connect_destination(const std::string& source_addr) {
    try {
        _dest = net::tcp_connect(_opt.destination, connect_timeout);
    } catch (const std::exception& e) {
        throw error(fmt::format("cannot reach the destination daemon: {}", e.what()));
    }
    FerryControl__IncomingPrepare prep = FERRY_CONTROL__INCOMING_PREPARE__INIT;
    prep.migration_id = const_cast<char*>(_r.id.c_str());
    prep.source_addr = const_cast<char*>(source_addr.c_str());
    const std::string fabric = _opt.fabric.to_string();
    prep.fabric = const_cast<char*>(fabric.c_str());
    prep.pool = _r.pool.empty() ? nullptr : const_cast<char*>(_r.pool.c_str());
    prep.has_workload_bytes = true;
    prep.workload_bytes = _r.workload_bytes;
    prep.has_deadline_scale = true;
    prep.deadline_scale = _opt.deadline_scale;
    prep.has_no_hw_breakpoints = true;
    prep.no_hw_breakpoints = _opt.no_hw_breakpoints;
    if (_container) {
        prep.engine = const_cast<char*>(_opt.engine.c_str());
        prep.container_name = const_cast<char*>(_container->name.c_str());
        prep.container_image = const_cast<char*>(_container->image.c_str());
        _container_config = _source->config_for_prepare();
        if (!_container_config.empty()) {
            prep.has_container_config = true;
            prep.container_config.data = _container_config.data();
            prep.container_config.len = _container_config.size();
        }
    }
    control::send_message(_dest.get(), prep, net::after(control_timeout));
    auto ok = control::receive(_dest.get(), net::after(control_timeout));
    control::expect(ok.get(), FERRY_CONTROL__ENVELOPE__BODY_PREPARE_OK,
                    "destination " + _opt.destination.to_string());
}

void migration::connect_local_daemon() {
    const std::string fabric = _opt.fabric.to_string();
    try {
        _src = net::tcp_connect(_opt.local_daemon, connect_timeout);
    } catch (const std::exception& e) {
        throw error(
            fmt::format("cannot reach the local daemon (the source pagesrv): {}", e.what()));
    }
    // Let the source daemon register memory for the fabric while the tree
    // still runs (for shm it allocates the region), not during the downtime.
    const uint64_t t0 = monotonic_ns();
    FerryControl__OutgoingPrepare prep_src = FERRY_CONTROL__OUTGOING_PREPARE__INIT;
    prep_src.migration_id = const_cast<char*>(_r.id.c_str());
    prep_src.root_pid = _opt.pid;
    prep_src.fabric = const_cast<char*>(fabric.c_str());
    control::send_message(_src.get(), prep_src, net::after(control_timeout));
    auto prepared = control::receive(_src.get(), net::after(std::chrono::minutes(2)));
    control::expect(prepared.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_PREPARED,
                    "local daemon");
    _r.prepare_ns = monotonic_ns() - t0;
}

// CRIU's lazy dump parks every page in pipes of at most fs.pipe-max-size,
// with one round trip to its parasite per pipe. CRIU can use pipes of up to
// 819 pages; with the default 1 MiB limit (256 pages) freezing 1 GiB took
// about twice as long on the machines Ferry was measured on.
void raise_pipe_max_size(spdlog::logger& log) {
    constexpr uint64_t wanted = 4u << 20;
    const char* path = "/proc/sys/fs/pipe-max-size";
    uint64_t current = 0;
    std::ifstream(path) >> current;
    if (current >= wanted)
        return;
    std::ofstream out(path);
    out << wanted;
    out.close();
    if (out)
        log.info("raised fs.pipe-max-size from {} to {} for CRIU's lazy dump", current, wanted);
    else
        log.warn("cannot raise fs.pipe-max-size to {} (it is {}); the freeze will be longer",
                 wanted, current);
}

void migration::start_dump() {
    raise_pipe_max_size(*_log);
    _dir = _opt.work_root / _r.id;
    std::filesystem::create_directories(_dir);
    _criu_port = net::pick_free_loopback_port();
    // Established TCP connections cannot move with the workload here (its
    // addresses stay behind); with --tcp-close they are left out of the
    // dump and come back closed, and clients reconnect. Connections still
    // in a listener's queue (clients retrying while it is frozen) go too.
    criu::dump_settings settings;
    settings.limits = _deadlines;
    settings.criu_options = _opt.tcp_close ? "tcp-close\nskip-in-flight\n" : "";
    settings.criu_options += _opt.criu_config_extra;
    settings.criu_env = _criu_env;
    settings.interrupted = [] { return interrupt_requested(); };
    if (_source)
        _dump = _source->make_dump(_dir, _r.id, settings);
    else
        _dump = criu::make_rpc_dump(_opt.pid, _dir, _r.id, settings);
    set_phase("freezing");
    _dump->start(_criu_port);
    _dump_started = true;
}

// Registration comes before the images leave, so the source can serve pages
// as soon as the destination asks; its reply is read afterwards.
void migration::register_with_source() {
    FerryControl__OutgoingRegister reg = FERRY_CONTROL__OUTGOING_REGISTER__INIT;
    const std::string dir = _dump->images_dir().string();
    reg.migration_id = const_cast<char*>(_r.id.c_str());
    reg.images_dir = const_cast<char*>(dir.c_str());
    reg.root_pid = _opt.pid;
    reg.criu_page_server_port = _criu_port;
    const std::string fabric = _opt.fabric.to_string();
    reg.fabric = const_cast<char*>(fabric.c_str());
    reg.pool = _r.pool.empty() ? nullptr : const_cast<char*>(_r.pool.c_str());
    reg.has_deadline_scale = true;
    reg.deadline_scale = _opt.deadline_scale;
    control::send_message(_src.get(), reg, net::after(control_timeout));
}

image_list migration::collect_images() {
    image_list l;
    for (const auto& entry : std::filesystem::directory_iterator(_dump->images_dir())) {
        if (!entry.is_regular_file() || entry.path().extension() == ".log")
            continue;
        l.names.push_back(entry.path().filename().string());
        l.contents.push_back(criu::read_file(entry.path()));
    }
    const uint64_t t0 = monotonic_ns();
    auto engine_files = _dump->engine_files();
    _r.engine_files_ns = monotonic_ns() - t0;
    for (auto& f : engine_files) {
        l.names.push_back("engine." + f.name);
        l.contents.push_back(std::move(f.data));
    }
    if (fault_injected(fault::corrupt_images)) {
        for (size_t i = 0; i < l.names.size(); i++)
            if (l.names[i].rfind("pagemap-", 0) == 0 && l.contents[i].size() > 16)
                for (size_t b = 8; b < l.contents[i].size(); b += 7)
                    l.contents[i][b] ^= 0xa5;
    }
    return l;
}

void migration::send_images(const image_list& images) {
    const auto& names = images.names;
    const auto& contents = images.contents;
    // Frames of about 16 MiB at most: a lazy dump's images are small, but
    // memory CRIU cannot leave lazy (shared mappings, for one) lands in them.
    constexpr size_t frame_bytes = 16u << 20;
    std::vector<FerryControl__ImageFile> pieces;
    pieces.reserve(64);
    auto flush = [&](bool last) {
        std::vector<FerryControl__ImageFile*> ptrs;
        for (auto& p : pieces)
            ptrs.push_back(&p);
        FerryControl__IncomingImages msg = FERRY_CONTROL__INCOMING_IMAGES__INIT;
        msg.n_files = ptrs.size();
        msg.files = ptrs.data();
        msg.has_last = true;
        msg.last = last;
        control::send_message(_dest.get(), msg, net::after(control_timeout));
        pieces.clear();
    };
    size_t in_frame = 0;
    for (size_t i = 0; i < names.size(); i++) {
        _r.images_bytes += contents[i].size();
        size_t offset = 0;
        do {
            const size_t len = std::min(contents[i].size() - offset, frame_bytes);
            const auto f = image_piece(images, i, offset, len);
            if (in_frame + len > frame_bytes && !pieces.empty()) {
                flush(false);
                in_frame = 0;
            }
            pieces.push_back(f);
            in_frame += len;
            offset += len;
        } while (offset < contents[i].size());
    }
    flush(true);
    _r.image_files = uint32_t(names.size());
    _r.t_images_sent = monotonic_ns();
}

void migration::wait_registered() {
    auto e = control::receive(_src.get(), net::after(control_timeout));
    control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_REGISTERED, "local daemon");
    _registered = true;
    _r.source_pages_total = e->outgoing_registered->pages_total;
    if (const auto* m = e->outgoing_registered->moments) {
        // The source daemon shares this host's clock. The workload stopped
        // at the engine's pause (docker) or else at CRIU's freeze.
        _r.t_engine_pause = m->has_engine_pause_ns ? m->engine_pause_ns : 0;
        _r.t_criu_freeze = m->has_freeze_start_ns ? m->freeze_start_ns : 0;
        _r.t_frozen = m->has_frozen_ns ? m->frozen_ns : 0;
        // Before them the migrator only knew when it asked for the dump.
        uint64_t exact = 0;
        for (const uint64_t t : {_r.t_engine_pause, _r.t_criu_freeze})
            if (t && (!exact || t < exact))
                exact = t;
        if (exact)
            _r.t_freeze = exact;
    }
}

// The destination has restored the tasks and waits at post-restore. Make sure
// the source can stay frozen (CRIU's page server is up, so CLOSE will work),
// commit it, then let the destination resume.
void migration::handle_resume_request() {
    _r.t_ready_to_resume = monotonic_ns();
    if (fault_injected(fault::interrupt_before_commit))
        ::raise(SIGINT);
    check_interrupt(); // the last moment at which the source can still resume
    if (_opt.mode == migrate_mode::unpark) {
        _r.committed = true; // no source: nothing else can run this workload
        _r.t_committed = monotonic_ns();
    } else {
        try {
            commit_source();
        } catch (const std::exception& e) {
            // The destination's copy must not run: say so now rather than
            // let its gate run out of time.
            FerryControl__ResumeDecision d = FERRY_CONTROL__RESUME_DECISION__INIT;
            d.resume = false;
            const std::string why = fmt::format("the source cannot commit: {}", e.what());
            d.reason = const_cast<char*>(why.c_str());
            try {
                control::send_message(_dest.get(), d, net::after(std::chrono::seconds(5)));
            } catch (const std::exception&) {
            }
            _destination_never_ran = true;
            throw;
        }
        set_phase("committed");
    }
    FerryControl__ResumeDecision d = FERRY_CONTROL__RESUME_DECISION__INIT;
    d.resume = true;
    control::send_message(_dest.get(), d, net::after(control_timeout));
}

// From here on the source tasks must never run again.
void migration::commit_source() {
    _dump->wait_page_server(_deadlines.page_server);
    // The record says "committed" before the daemon hears it, so that an
    // operator's abort never resumes a source that might be committed.
    _committing = true;
    set_phase("committing");
    FerryControl__OutgoingCommit c = FERRY_CONTROL__OUTGOING_COMMIT__INIT;
    control::send_message(_src.get(), c, net::after(control_timeout));
    auto e = control::receive(_src.get(), net::after(control_timeout));
    control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_COMMITTED, "local daemon");
    _r.committed = true;
    _r.t_committed = monotonic_ns();
}

void migration::wait_resumed() {
    set_phase("restoring");
    const auto until = net::after(_deadlines.restore + restore_margin);
    for (;;) {
        // While waiting for the destination, answer CRIU's notifications
        // promptly so its page server comes up in parallel.
        const int dump_fd = _dump ? _dump->event_fd() : -1;
        pollfd fds[2] = {{_dest.get(), POLLIN, 0}, {dump_fd, POLLIN, 0}};
        const int nfds = dump_fd < 0 ? 1 : 2;
        if (::poll(fds, nfds_t(nfds), 100) < 0 && errno != EINTR)
            throw sys_error("poll");
        if (std::chrono::steady_clock::now() > until)
            throw error("the destination did not restore in time");
        check_interrupt();
        if (nfds == 2 && fds[1].revents)
            _dump->on_event();
        if (!fds[0].revents)
            continue;
        auto e = control::receive(_dest.get(), net::after(control_timeout));
        if (!e)
            throw error("the destination daemon closed the connection before resuming");
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_RESUME_REQUEST) {
            handle_resume_request();
            continue;
        }
        control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_RESTORE_RESULT, "destination");
        const auto& res = *e->restore_result;
        if (!res.ok) {
            // Sent only while the restored tasks have not run: CRIU killed them.
            _destination_never_ran = true;
            throw error(fmt::format("restore failed on the destination: {}",
                                    res.error ? res.error : "unknown"));
        }
        // An engine's restore returns a little after the tasks resumed; the
        // destination measured by how much (network latency not counted).
        const uint64_t now = monotonic_ns();
        _r.dest_engine_settle_ns = res.has_engine_settle_ns ? res.engine_settle_ns : 0;
        _r.t_resumed = now - _r.dest_engine_settle_ns;
        if (const auto* m = res.moments;
            m && m->has_resumed_ns && m->has_now_ns && m->now_ns >= m->resumed_ns) {
            // The plugin's resume, by its age when the destination replied
            // (this over-states the downtime by the reply's one-way trip).
            _r.t_plugin_resumed = now - (m->now_ns - m->resumed_ns);
            _r.t_resumed = _r.t_plugin_resumed;
        }
        _r.destination_pid = res.has_root_pid ? res.root_pid : -1;
        _r.dest_images_check_ns = res.images_check_ns;
        _r.dest_lazy_start_ns = res.lazy_start_ns;
        _r.dest_criu_restore_ns = res.criu_restore_ns;
        return;
    }
}

// Pool mode: ask the source to report when the pool holds every page.
void migration::request_handoff() {
    FerryControl__OutgoingHandoff h = FERRY_CONTROL__OUTGOING_HANDOFF__INIT;
    control::send_message(_src.get(), h, net::after(control_timeout));
}

// The push is over. If it succeeded, the source's job is done: end CRIU's
// dump now, so the source tasks and their memory go, while the destination
// reads the rest from the pool.
void migration::handle_handoff() {
    if (!receive_handoff()) {
        _log->warn("no hand-off to the pool ({}); the source serves until the destination is done",
                   _r.handoff_error);
        return;
    }
    finish_source();
    _r.handed_off = true;
    _r.t_handed_off = monotonic_ns();
}

// The source daemon's answer to request_handoff: did the pool take every page?
bool migration::receive_handoff() {
    auto e = control::receive(_src.get(), net::no_deadline);
    control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_HANDED_OFF, "local daemon");
    const auto& h = *e->outgoing_handed_off;
    _r.pool_push_ns = h.push_ns;
    _r.pool_bytes_stored = h.bytes_stored;
    _r.pool_pages_pushed = h.pages;
    if (!h.ok)
        _r.handoff_error = h.error ? h.error : "unknown";
    return h.ok;
}

void migration::wait_transfer() {
    if (_opt.pool && _opt.mode == migrate_mode::migrate) {
        request_handoff();
        _handoff_pending = true;
    }
    for (;;) {
        if (_handoff_pending) {
            // The destination reports every 200 ms: its silence is bounded
            // here as in the receive below.
            pollfd fds[2] = {{_dest.get(), POLLIN, 0}, {_src.get(), POLLIN, 0}};
            const int n =
                ::poll(fds, 2, int(std::chrono::milliseconds(transfer_silence_limit).count()));
            if (n < 0 && errno != EINTR)
                throw sys_error("poll");
            if (n == 0)
                throw error(fmt::format("the destination sent nothing for {} s after it resumed; "
                                        "the source stays frozen",
                                        transfer_silence_limit.count()));
            if (fds[1].revents) {
                _handoff_pending = false;
                handle_handoff();
                continue;
            }
            if (!fds[0].revents)
                continue;
        }
        control::envelope_ptr e;
        try {
            e = control::receive(_dest.get(), net::after(transfer_silence_limit));
        } catch (const std::exception& ex) {
            throw error(fmt::format(
                "lost the destination after it resumed ({}); the source stays frozen", ex.what()));
        }
        if (!e)
            throw error(
                "the destination closed the connection after it resumed; the source stays frozen");
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_PROGRESS) {
            if (_opt.show_progress) {
                const auto& p = *e->transfer_progress;
                std::fprintf(stderr, "\r  post-copy: %5.1f%%  %llu / %llu pages",
                             p.pages_total ? 100.0 * double(p.pages_done) / double(p.pages_total)
                                           : 100.0,
                             static_cast<unsigned long long>(p.pages_done),
                             static_cast<unsigned long long>(p.pages_total));
            }
            continue;
        }
        control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_TRANSFER_STATS, "destination");
        if (_opt.show_progress)
            std::fprintf(stderr, "\n");
        const auto& s = *e->transfer_stats;
        auto& t = _r.transfer;
        t.present = true;
        t.error = s.error ? s.error : "";
        t.stats = s;
        t.pool_lost_nodes = s.pool_lost_nodes ? s.pool_lost_nodes : "";
        t.pool_members = s.pool_members ? s.pool_members : "";
        t.pool_scrub_error = s.pool_scrub_error ? s.pool_scrub_error : "";
        t.stats.error = nullptr; // pointers into the envelope, which is freed
        t.stats.pool_lost_nodes = t.stats.pool_members = t.stats.pool_scrub_error = nullptr;
        t.stats.base.n_unknown_fields = 0;
        t.stats.base.unknown_fields = nullptr;
        _r.t_transferred = monotonic_ns();
        if (!s.ok)
            throw error(fmt::format("the destination failed during post-copy: {}", t.error));
        return;
    }
}

// Every page is on the destination: end CRIU's dump, which kills the
// frozen source tasks. If CRIU cannot be ended, the tasks are killed anyway:
// the destination runs the workload, so the source must never run again.
void migration::finish_source() {
    set_phase("finishing");
    try {
        FerryControl__OutgoingFinish f = FERRY_CONTROL__OUTGOING_FINISH__INIT;
        control::send_message(_src.get(), f, net::after(control_timeout));
        auto e = control::receive(_src.get(), net::after(_deadlines.close + control_timeout));
        control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_FINISHED, "local daemon");
        _r.source_pages_served = e->outgoing_finished->pages_served;
        _r.source_bytes_sent = e->outgoing_finished->bytes_sent;
        if (const auto* m = e->outgoing_finished->moments; m && m->has_dump_end_ns)
            _r.t_dump_end = m->dump_end_ns;
        if (e->outgoing_finished->recovery && *e->outgoing_finished->recovery)
            _r.recovery = e->outgoing_finished->recovery;
        if (!_dump->wait_end(_deadlines.close)) {
            if (_dump->stuck())
                throw criu::criu_timeout(_dump->end_error());
            _log->warn("CRIU reported the dump as failed after CLOSE: {}", _dump->end_error());
        }
    } catch (const std::exception& e) {
        _log->error("cannot end the source's dump ({}); ending the source tasks directly",
                    e.what());
        release_source(true);
        if (!criu::inspect_workload(_opt.pid).gone())
            throw error(fmt::format("the source could not be ended after the destination took "
                                    "over: {}",
                                    _r.recovery));
    }
    _r.t_finished = monotonic_ns();
}

// Before the commit (or after it, when the destination's restore failed
// before its tasks ran): the source tasks must run again. CRIU resumes them
// itself when it can; a CRIU that is stuck is not waited on again: it is
// killed and what it left is undone (release_source). Bounded throughout.
void migration::abort_source(const std::string& reason) {
    if (!_dump_started || (_dump->ended() && !_dump->stuck()))
        return; // CRIU never froze the tasks, or already resumed them after its own failure
    set_phase("aborting");
    _dump->ignore_interrupts(); // the abort itself must finish
    if (!_dump->stuck() && abort_gracefully(reason) && criu::inspect_workload(_opt.pid).running())
        return;
    release_source(false);
    tell_daemon_aborted(reason);
}

// CRIU's own way back: an abort through its page server (by way of the
// local daemon once it serves the migration). True if CRIU ended.
bool migration::abort_gracefully(const std::string& reason) {
    try {
        // A healthy CRIU is at most moments away from its page server (no
        // memory work is left after post-dump); one that is not is treated
        // as stuck rather than waited on for a full deadline.
        _dump->wait_page_server(
            std::min<std::chrono::milliseconds>(_deadlines.page_server, abort_page_server_grace));
        if (_registered && _src) {
            try {
                FerryControl__OutgoingAbort a = FERRY_CONTROL__OUTGOING_ABORT__INIT;
                a.reason = const_cast<char*>(reason.c_str());
                a.has_destination_never_ran = _r.committed;
                a.destination_never_ran = _r.committed;
                control::send_message(_src.get(), a, net::after(control_timeout));
                auto e =
                    control::receive(_src.get(), net::after(_deadlines.abort + control_timeout));
                control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_ABORTED,
                                "local daemon");
                _daemon_told_abort = true;
            } catch (const std::exception& e) {
                _log->warn("the local daemon could not abort ({}); aborting CRIU directly",
                           e.what());
                criu::abort_lazy_dump(_criu_port, std::chrono::seconds(10));
            }
        } else {
            criu::abort_lazy_dump(_criu_port, std::chrono::seconds(10));
        }
        (void)_dump->wait_end(_deadlines.abort); // failed, by design: the tasks were resumed
        return _dump->ended() && !_dump->stuck();
    } catch (const std::exception& e) {
        _log->warn("CRIU did not take the abort: {}", e.what());
        return false;
    }
}

// CRIU is killed (the kernel detaches its tracees), then the freezer and
// the network lock it left are undone, and the tasks are checked. With
// `end_workload` (after the commit) the tasks are killed first instead.
void migration::release_source(bool end_workload) {
    set_phase("releasing");
    _r.criu_stuck = _dump && _dump->stuck();
    criu::release_request req;
    req.root = _opt.pid;
    req.migration_id = _r.id;
    if (_dump)
        req.criu = _dump->criu_pids();
    req.end_workload = end_workload;
    req.was_frozen_before = _cgroup_was_frozen;
    req.bound = _deadlines.release;
    if (_dump)
        req.after_criu_killed = [this] { _dump->after_criu_killed(); };
    const auto res = criu::release_workload(req);
    _r.recovery = res.summary;
}

// The daemon serving the migration stops (it no longer tries CRIU's page
// server: CRIU is gone). Best effort, bounded.
void migration::tell_daemon_aborted(const std::string& reason) {
    if (!_registered || !_src || _daemon_told_abort)
        return;
    try {
        FerryControl__OutgoingAbort a = FERRY_CONTROL__OUTGOING_ABORT__INIT;
        a.reason = const_cast<char*>(reason.c_str());
        a.has_destination_never_ran = _r.committed;
        a.destination_never_ran = _r.committed;
        a.has_criu_gone = true;
        a.criu_gone = true;
        control::send_message(_src.get(), a, net::after(std::chrono::seconds(5)));
        (void)control::receive(_src.get(), net::after(std::chrono::seconds(10)));
        _daemon_told_abort = true;
    } catch (const std::exception& e) {
        _log->warn("could not tell the local daemon about the abort: {}", e.what());
    }
}

// A failed migration keeps CRIU's logs for the post-mortem, not its images
// (they can be as large as the workload's memory, and /dev/shm is memory).
void migration::cleanup() {
    if (_opt.keep_images || _dir.empty())
        return;
    std::error_code ec;
    if (_r.ok) {
        std::filesystem::remove_all(_dir, ec);
        return;
    }
    for (const auto& entry : std::filesystem::directory_iterator(_dir, ec))
        if (entry.path().extension() != ".log")
            std::filesystem::remove_all(entry.path(), ec);
}

// Park: the pool takes every page (the source's push) and the record with
// the images (from here); only then is the source committed and its dump
// closed. Anything failing before that resumes the source and removes what
// reached the pool.
void migration::park() {
    set_phase("parking");
    register_with_source();
    const auto images = collect_images();
    std::vector<FerryControl__ImageFile> files(images.names.size());
    std::vector<FerryControl__ImageFile*> ptrs;
    for (size_t i = 0; i < files.size(); i++) {
        files[i] = image_piece(images, i, 0, images.contents[i].size());
        _r.images_bytes += files[i].data.len;
        ptrs.push_back(&files[i]);
    }
    _r.image_files = uint32_t(files.size());
    wait_registered();
    const std::string criu_version = criu::require_supported_criu().to_string();
    char host[256] = "";
    ::gethostname(host, sizeof host - 1);
    FerryControl__ParkedWorkload rec = FERRY_CONTROL__PARKED_WORKLOAD__INIT;
    rec.name = const_cast<char*>(_opt.park_name.c_str());
    rec.migration_id = const_cast<char*>(_r.id.c_str());
    rec.pool = const_cast<char*>(_r.pool.c_str());
    rec.pages_total = _r.source_pages_total;
    rec.parked_at_unix_ms = uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
    rec.criu_version = const_cast<char*>(criu_version.c_str());
    rec.n_images = ptrs.size();
    rec.images = ptrs.data();
    rec.source_host = host;
    rec.has_source_pid = true;
    rec.source_pid = uint32_t(_opt.pid);
    _record_stored = true; // from the first byte: an abort drops what made it
    _r.park_record_bytes = store_record(_opt.pool->nodes, rec);
    _r.t_images_sent = monotonic_ns();

    request_handoff();
    if (!receive_handoff())
        throw error("the pool did not take every page: " + _r.handoff_error);
    check_interrupt(); // the last moment at which the source can still resume
    commit_source();
    finish_source();
    _r.handed_off = true;
    _r.t_handed_off = monotonic_ns();
}

// Unpark: the record says where the pages are; the destination restores
// from its images and reads every page from the pool.
void migration::load_parked() {
    _parked = load_record(_opt.pool->nodes, _opt.park_name);
    if (!_parked)
        throw error(fmt::format("no workload named '{}' is parked in the pool {}", _opt.park_name,
                                record_spec(_opt.pool->nodes).to_string()));
    _opt.pool = pool::pool_spec::parse(_parked->pool);
    _r.pool = _parked->pool;
    _r.source_pid = pid_t(_parked->has_source_pid ? _parked->source_pid : 0);
    _r.source_pages_total = _parked->pages_total;
}

// No source: the images come from the parked record, the pages from the pool.
void migration::run_unpark() {
    try {
        load_parked();
        connect_destination("");
        image_list images;
        for (size_t i = 0; i < _parked->n_images; i++) {
            const auto& f = *_parked->images[i];
            if (buffer_checksum(f.data.data, f.data.len) != f.xxh64)
                throw error(fmt::format("the parked image {} fails its checksum", f.name));
            images.names.emplace_back(f.name);
            images.contents.emplace_back(f.data.data, f.data.data + f.data.len);
        }
        _r.t_dumped = _r.t_start;
        send_images(images);
        wait_resumed();
    } catch (const std::exception& e) {
        _r.error = e.what(); // the record and the pages stay in the pool
        return;
    }
    try {
        wait_transfer();
        _r.ok = true;
        drop_record(_opt.pool->nodes, _opt.park_name); // no longer parked: it runs
    } catch (const std::exception& e) {
        _r.error = e.what();
    }
}

// Before the freeze: the name (checked by the CLI) must be free; the pages
// get an object id that the record can name.
void migration::reserve_park_name() {
    if (load_record(_opt.pool->nodes, _opt.park_name))
        throw error(
            fmt::format("a workload named '{}' is already parked in this pool", _opt.park_name));
    _opt.pool->object = pool::object_for(_r.id);
    _r.pool = _opt.pool->to_string();
}

migration_result migration::run() {
    _r.t_start = monotonic_ns();
    if (_opt.mode == migrate_mode::unpark) {
        run_unpark();
        return _r;
    }
    try {
        set_phase("preparing");
        check_source();
        set_phase("preparing");
        (void)criu::require_supported_criu();
        if (_opt.mode == migrate_mode::park) {
            reserve_park_name();
        } else {
            connect_destination(_opt.advertised_source.value_or(_opt.local_daemon).to_string());
        }
        connect_local_daemon();
        check_interrupt();
        start_dump();
        {
            const auto t = _dump->wait_dumped();
            _r.t_freeze = t.freeze;
            _r.t_dumped = t.dumped;
        }
        if (_opt.mode == migrate_mode::park) {
            park();
            _r.ok = true;
            cleanup();
            return _r;
        }
        set_phase("shipping");
        register_with_source();
        send_images(collect_images());
        wait_registered();
        wait_resumed();
    } catch (const std::exception& e) {
        _r.error = e.what();
        if (!_r.committed || _destination_never_ran) {
            // Whatever the destination restored must not resume: without its
            // migrator it refuses, and kills the copy, at once.
            _dest.reset();
            abort_source(_r.error);
            _r.source_running = criu::inspect_workload(_opt.pid).running();
        }
        if (_record_stored && !_r.committed)
            drop_record(_opt.pool->nodes, _opt.park_name);
        cleanup();
        return _r;
    }
    try {
        set_phase("post-copy");
        wait_transfer();
        if (_handoff_pending) {
            // The post-copy ended before the push: the daemon answers the
            // hand-off request first (once the push is over), then FINISH.
            _handoff_pending = false;
            handle_handoff();
        }
        if (!_r.handed_off)
            finish_source();
        _r.ok = true;
        if (_container)
            _r.source_removed = _dump->remove_source();
        if (!process_gone(_opt.pid))
            _log->warn("source pid {} is still present after the dump ended", _opt.pid);
    } catch (const std::exception& e) {
        _r.error = e.what();
    }
    cleanup();
    return _r;
}

} // namespace

const char* to_string(migrate_mode m) noexcept {
    switch (m) {
    case migrate_mode::park:
        return "checkpoint";
    case migrate_mode::unpark:
        return "restore";
    case migrate_mode::migrate:
        break;
    }
    return "migrate";
}

double migration_result::downtime_ms() const noexcept {
    switch (mode) {
    case migrate_mode::park: // frozen until the pool holds it all
        return t_freeze && t_handed_off ? ns_to_ms(t_handed_off - t_freeze) : 0;
    case migrate_mode::unpark: // from the command to the workload running
        return t_start && t_resumed ? ns_to_ms(t_resumed - t_start) : 0;
    case migrate_mode::migrate:
        break;
    }
    return t_freeze && t_resumed ? ns_to_ms(t_resumed - t_freeze) : 0;
}

double migration_result::total_ms() const noexcept {
    const uint64_t end = std::max(t_finished, t_transferred);
    return t_freeze && end ? ns_to_ms(end - t_freeze) : 0;
}

void request_interrupt() noexcept {
    interrupted.store(true);
}

bool interrupt_requested() noexcept {
    return interrupted.load();
}

migration_result migrate(const migrate_options& opt) {
    return migration(opt).run();
}

} // namespace ferry::migrator
