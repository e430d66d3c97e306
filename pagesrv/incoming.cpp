#include "incoming.hpp"

#include "image_names.hpp"
#include "incoming_session.hpp"
#include "sys/kept_logs.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "criu/criu_config.hpp"
#include "criu/criu_features.hpp"
#include "criu/criu_image.hpp"
#include "criu/restore_network_lock.hpp"
#include "engine_request.hpp"
#include "pool/pool_layout.hpp"
#include "sys/proc.hpp"
#include "transport/fabric.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace ferry::pagesrv {

namespace {

// Between two frames of images from the migrator.
constexpr auto images_timeout = std::chrono::minutes(4);

bool valid_migration_id(const std::string& id) {
    return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

} // namespace

void incoming_session::send_restore_failure(const std::string& failure) {
    _progress_asked = false; // nothing follows the result
    const std::string why =
        _resume_refused.empty()
            ? failure
            : fmt::format("the resume was refused ({}), and the copy killed: {}", _resume_refused,
                          failure);
    _log->error("{}", why);
    FerryControl__RestoreResult r = FERRY_CONTROL__RESTORE_RESULT__INIT;
    r.ok = false;
    r.error = const_cast<char*>(why.c_str());
    (void)control::try_send_message(_conn, r,
                                    net::after(control_timeout)); // the migrator may be gone
}

void incoming_session::report_progress(const char* step) noexcept {
    if (!_progress_asked || _resumed) // the result went: nothing follows it
        return;
    // The first report comes an interval after the images (receive_images
    // starts the clock), never inside the downtime: there one held the
    // resume request behind Nagle for the migrator's delayed ACK, ~40 ms.
    const uint64_t now = monotonic_ns();
    if (now - _last_progress_ns <
        uint64_t(std::chrono::nanoseconds(control::restore_progress_interval).count()))
        return;
    _last_progress_ns = now;
    FerryControl__RestoreProgress p = FERRY_CONTROL__RESTORE_PROGRESS__INIT;
    p.elapsed_ms = _t_images_ns ? (now - _t_images_ns) / 1'000'000 : 0;
    p.step = const_cast<char*>(step);
    (void)control::try_send_message(_conn, p, net::after(control_timeout));
}

void incoming_session::kill_restored(const std::string& why) {
    if (_root_pid <= 0)
        return;
    // Fail-stop: tasks whose pages cannot be served must not run on zeros.
    _log->error("killing the restored tree (root pid {}): {}", _root_pid, why);
    ::kill(_root_pid, SIGKILL);
}

// Refusals go back to the migrator as an error frame, before the source freezes.
void incoming_session::prepare() {
    try {
        check_prepare();
    } catch (const std::exception& e) {
        (void)control::try_send_error(_conn, e.what(), net::after(control_timeout));
        throw;
    }
    std::string idle_state = "off: the migrator did not ask";
    if (_idle_poll_asked && _d.config().no_idle_poll) {
        idle_state = "off on this host (pagesrv --no-idle-poll)";
    } else if (_idle_poll_asked) {
        _idle_poll = std::make_unique<idle_poll::hold>(idle_poll::downtime_limit);
        idle_state = _idle_poll->state();
        if (!_idle_poll->held())
            _log->info("idle CPUs keep halting through the restore: {}", idle_state);
    }
    // The helpers start now, before the source freezes.
    spawn_lazy_pages();
    if (_engine.empty())
        start_criu_restore();
    // Both restore paths write these lines; the probe (a criu run, once per
    // process) goes now, not in the downtime.
    (void)criu::restore_feature_lines(_d.config().tools.criu);
    FerryControl__PrepareOk ok = FERRY_CONTROL__PREPARE_OK__INIT;
    ok.criu_version = const_cast<char*>(_d.criu_version().c_str());
    ok.has_restores_nftables_lock = true;
    ok.restores_nftables_lock =
        criu::supports_feature(_d.config().tools.criu, "network_lock_nftables");
    ok.has_starts_warm = true;
    ok.starts_warm = true;
    ok.has_builds_mounts_early = true;
    ok.builds_mounts_early = builds_mounts_early();
    ok.idle_poll = idle_state.data();
    ok.has_reports_restore_progress = true;
    ok.reports_restore_progress = _progress_asked;
    control::send_message(_conn, ok, net::after(control_timeout));
}

void incoming_session::release_idle_poll() noexcept {
    if (!_idle_poll)
        return;
    if (const auto state = _idle_poll->state(); state != "held") {
        if (_idle_poll_post_copy) // a long post-copy outlasts its bound
            _log->info("idle polling through the post-copy {}", state);
        else
            _log->warn("idle polling {}", state);
    }
    _idle_poll.reset();
    _idle_poll_post_copy = false;
}

// The prepare's hold lapses 10 s after it, and the source's pre-copy runs
// between the prepare and the freeze: a long one (4 GiB, or a slow link)
// left the downtime with halting CPUs. The images come once the source is
// frozen, so the downtime gets a hold of its own then if that one lapsed.
void incoming_session::renew_downtime_hold() noexcept {
    if (!_idle_poll || !_idle_poll->lapsed())
        return;
    const std::string before = _idle_poll->state();
    try {
        _idle_poll = idle_poll::renewed(std::move(_idle_poll), idle_poll::downtime_limit);
    } catch (const std::exception& e) {
        _log->warn("idle polling for the downtime: {}", e.what());
        return;
    }
    if (_idle_poll->lapsed())
        _log->warn("idle CPUs keep halting through the downtime: the prepare's hold {}", before);
    else
        _log->info("idle CPUs poll again for the downtime: the prepare's hold {}", before);
}

// The workload's faults wait on wake-ups across threads and hosts as the
// downtime did (a handler, the channel, the faulting thread), and a
// pre-copy's post-copy leaves the CPUs idle a fifth of the time: a new hold,
// with a bound of its own, from the resume to the transfer's end (or the
// session's). Only where the downtime's hold stood.
void incoming_session::hold_idle_poll_through_post_copy() noexcept {
    if (!_idle_poll)
        return;
    std::unique_ptr<idle_poll::hold> next;
    try {
        next = std::make_unique<idle_poll::hold>(idle_poll::post_copy_limit);
    } catch (const std::exception& e) {
        _log->warn("idle polling through the post-copy: {}", e.what());
    }
    release_idle_poll(); // after the new one stands: no gap between them
    if (next && next->held()) {
        _idle_poll = std::move(next);
        _idle_poll_post_copy = true;
        _log->info("idle CPUs poll through the post-copy (at most {} s)",
                   idle_poll::post_copy_limit.count() / 1000);
    }
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
    _dir = _d.config().work_dir / _id;
    if (!std::filesystem::create_directory(_dir))
        throw error(fmt::format("migration {} already exists here", _id));
    _record_dir = _d.config().state_dir / "incoming" / _id;
    if (_engine.empty() && _connections_move)
        make_copy_netns();
    if (!_engine.empty()) {
        _engine_restore = engines::make_engine_restore(_engine, _container, _d.config().tools);
        if (_connections_move)
            _engine_restore->keep_network(_moving_links);
        std::filesystem::create_directories(_record_dir);
        _engine_restore->reserve(_record_dir, _container_image, _container_config);
    }
}

bool incoming_session::receive_images() {
    uint64_t t0 = 0;
    for (bool last = false; !last;) {
        auto e = control::receive(_conn, net::after(images_timeout));
        if (!e) {
            _log->warn("the migrator left before sending every image");
            return false;
        }
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_INCOMING_WARM && _engine_restore && !t0 &&
            !_warm_cmd) {
            start_warm_restore(*e->incoming_warm);
            continue;
        }
        if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_INCOMING_MOUNTS && !t0) {
            take_mounts_early(*e->incoming_mounts);
            continue;
        }
        control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_INCOMING_IMAGES, "migrator");
        if (fault_injected(fault::dest_die_before_restore)) {
            _log->warn("fault injection: dying before restore");
            ::raise(SIGKILL);
        }
        if (!t0) {
            t0 = monotonic_ns();
            _t_images_ns = _last_progress_ns = t0;
            renew_downtime_hold();
        }
        const auto& images = *e->incoming_images;
        last = images.has_last && images.last;
        for (size_t i = 0; i < images.n_files; i++) {
            const auto& f = *images.files[i];
            if (!acceptable_image_name(f.name)) {
                send_restore_failure(fmt::format("refusing image file name '{}'", f.name));
                return false;
            }
            const uint64_t end = (f.has_offset ? f.offset : 0) + f.data.len;
            if (end > max_image_file_bytes || end < f.data.len) {
                send_restore_failure(
                    fmt::format("refusing image {}: {} bytes is too large", f.name, end));
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
        // Its copy is unreachable until the takeover (moving_network.cpp):
        // CRIU's own lock would only cost its removal before the resume.
        if (_connections_move)
            criu::skip_restore_network_lock(_dir);
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

bool incoming_session::restore() {
    return _engine_restore ? restore_with_engine() : restore_with_criu();
}

void incoming_session::discard_images() noexcept {
    std::error_code ec;
    if (_dir.empty())
        return;
    // A work dir that is also the state dir's incoming/ (the VM testbed's)
    // holds the reservation record too: it goes with the container it
    // names (~incoming_session), not with the images.
    for (const auto& entry : std::filesystem::directory_iterator(_dir, ec))
        if (entry.path().extension() != ".log" &&
            entry.path().filename() != engines::reservation_file)
            std::filesystem::remove_all(entry.path(), ec); // mnt-early/ too
}

void incoming_session::run() {
    prepare();
    _log->info("incoming from source {}", _source);
    if (!receive_images())
        return;
    if (fault_injected(fault::dest_stall_before_restore)) {
        _log->warn("fault injection: stalling for 60 s before restore");
        std::this_thread::sleep_for(std::chrono::seconds(60));
    }
    if (!start_lazy_pages())
        return;
    if (!restore()) {
        if (_resumed)
            kill_restored("restore reported failure after the tasks resumed");
        return;
    }
    _log->info("resumed as pid {}", _root_pid);
    relay_transfer();
}

void serve_incoming(daemon& d, net::stream& conn, const FerryControl__IncomingPrepare& prepare) {
    // Once the session is gone (this is destroyed after it), only the
    // newest sessions' logs stay on the work dir's tmpfs.
    struct prune_logs_after {
        const std::filesystem::path& root;
        ~prune_logs_after() { (void)prune_kept_logs(root, kept_migration_logs); }
    } prune{d.config().work_dir};
    incoming_session session(d, conn, prepare);
    if (auto* m = d.metrics())
        m->migration_started(daemon_metrics::role::destination);
    try {
        session.run();
    } catch (...) {
        session.discard_images();
        if (auto* m = d.metrics())
            m->migration_ended(daemon_metrics::role::destination, false);
        throw;
    }
    session.discard_images();
    if (auto* m = d.metrics())
        m->migration_ended(daemon_metrics::role::destination, session.transferred());
}

} // namespace ferry::pagesrv
