#include "migration.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "criu/cgroup_yard.hpp"
#include "criu/criu_config.hpp"
#include "criu/criu_features.hpp"
#include "criu/criu_image.hpp"
#include "criu/criu_page_server.hpp"
#include "criu/criu_rpc.hpp"
#include "criu/workload_release.hpp"
#include "pool/pool_client.hpp"
#include "sys/hw_breakpoints.hpp"
#include "sys/private_dir.hpp"
#include "sys/proc.hpp"

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

} // namespace

FerryControl__ImageFile file_piece(const std::string& name, const std::vector<uint8_t>& data,
                                   size_t offset, size_t len) {
    FerryControl__ImageFile f = FERRY_CONTROL__IMAGE_FILE__INIT;
    f.name = const_cast<char*>(name.c_str());
    f.data.data = const_cast<uint8_t*>(data.data()) + offset;
    f.data.len = len;
    f.xxh64 = buffer_checksum(f.data.data, len);
    f.has_offset = true;
    f.offset = offset;
    return f;
}

std::vector<FerryControl__ImageFile*> piece_pointers(std::vector<FerryControl__ImageFile>& pieces) {
    std::vector<FerryControl__ImageFile*> ptrs;
    for (auto& p : pieces)
        ptrs.push_back(&p);
    return ptrs;
}

namespace {

// Sends `files`, each whole, as the files of `msg` (incoming_warm,
// incoming_mounts).
template <typename Msg>
void send_whole_files(net::stream& s, Msg msg, const std::vector<criu::engine_file>& files) {
    std::vector<FerryControl__ImageFile> pieces;
    for (const auto& f : files)
        pieces.push_back(file_piece(f.name, f.data, 0, f.data.size()));
    auto ptrs = piece_pointers(pieces);
    msg.n_files = ptrs.size();
    msg.files = ptrs.data();
    control::send_message(s, msg, net::after(control_timeout));
}

} // namespace

void migration::start_dump() {
    raise_pipe_max_size(*_log);
    _dir = _opt.work_root / _r.id;
    make_private_dir(_opt.work_root);
    std::filesystem::create_directories(_dir);
    _criu_port = net::pick_free_loopback_port();
    // Established TCP connections cannot move with the workload here (its
    // addresses stay behind); with --tcp-close they are left out of the
    // dump and come back closed, and clients reconnect. Connections still
    // in a listener's queue (clients retrying while it is frozen) go too.
    criu::dump_settings settings;
    settings.limits = _deadlines;
    settings.criu_options = _opt.tcp_close ? "tcp-close\nskip-in-flight\n" : "";
    if (_r.connections_move)
        settings.criu_options += "tcp-established\n";
    // A process tree's namespace is made anew by the destination: CRIU
    // dumps none of it (its sockets still go), and restores into that one.
    if (_source_netns)
        settings.criu_options +=
            fmt::format("external net[{}]:{}\n", _source_netns_inode, criu::moving_netns_key);
    settings.tcp_established = _r.connections_move;
    settings.criu_options += _r.criu_features.config_lines();
    settings.network_lock_nftables = _r.criu_features.network_lock_nftables;
    settings.network_lock_skip = _r.criu_features.network_lock_skip;
    if (_container) {
        // The host's cgroup mounts as CRIU's yard: CRIU mounts none of its own.
        const auto yard = criu::host_cgroup_yard();
        settings.criu_options += criu::cgroup_yard_config_line(yard);
        _r.criu_cgroup_yard =
            yard.dir.empty() ? "CRIU mounts its own (" + yard.why_not + ")" : yard.dir.string();
        // The engine's runc makes the container's cgroups, with the spec's
        // settings, before its CRIU restores, and CRIU (soft mode) restores
        // no property of a cgroup that exists: reading them in the freeze
        // (~65 files on a cgroup v1 host) is for sub-cgroups only (0029).
        if (criu::supports_option(_opt.tools.criu, "cgroup-skip-leaf-root-props"))
            settings.criu_options += "cgroup-skip-leaf-root-props\n";
    }
    settings.criu_options += _opt.criu_config_extra;
    settings.criu_env = _criu_env;
    settings.criu = _opt.tools.criu;
    settings.log_level = _opt.tools.criu_log_level;
    settings.plugin_dir = _opt.tools.criu_plugin_dir;
    // Polled by every wait on CRIU: the heartbeat goes from there too.
    settings.interrupted = [this] {
        if (daemon_gave_up())
            return true;
        beat("CRIU's dump");
        return interrupt_requested();
    };
    settings.warm_destination = _opt.mode == migrate_mode::migrate && _destination_starts_warm;
    // The destination builds the mount tree while it waits, from the mount
    // namespace CRIU dumps before the freeze (early_mounts.hpp).
    if (_container && settings.warm_destination && _destination_builds_mounts &&
        criu::supports_option(_opt.tools.criu, "mnt-early")) {
        settings.criu_options += "mnt-early\n";
        _mounts_early_asked = true;
    }
    if (_source)
        _dump = _source->make_dump(_dir, _r.id, settings);
    else
        _dump = criu::make_rpc_dump(_opt.pid, _dir, _r.id, settings);
    watch_vma_flags();
    if (settings.warm_destination) {
        start_destination_warm(_dump->configuration_before_start());
        send_mounts_early(); // docker's: its CRIU starts now
    }
    set_phase("freezing");
    _dump->start(_criu_port);
    _dump_started = true;
}

// An engine whose checkpoint holds before its runc starts (podman) has
// written the container's configuration by then: the destination starts its
// engine's restore from it before the freeze, and only then does the dump go
// on. A destination that cannot start warm says why and restores cold, once
// the images are in.
void migration::warm_destination() {
    auto files = _dump->wait_held(hold_limit);
    if (files.empty())
        return;
    start_destination_warm(files);
    send_mounts_early();
    _dump->release_hold();
}

// From the hold's release (CRIU has not started) to the dump's end: the
// destination's daemon is told nothing else meanwhile, so the watcher's
// thread has the connection to itself until stop_mounts_early().
void migration::send_mounts_early() {
    if (!_mounts_early_asked || !_destination_warm || _mounts_early)
        return;
    try {
        _mounts_early = std::make_unique<early_mounts_sender>(
            _dump->images_dir(), [this](const std::vector<criu::engine_file>& files) {
                send_whole_files(*_dest,
                                 FerryControl__IncomingMounts(FERRY_CONTROL__INCOMING_MOUNTS__INIT),
                                 files);
            });
    } catch (const std::exception& e) {
        _r.mounts_early_source = fmt::format("not watched: {}", e.what());
    }
}

// Before anything else uses the destination's connection: after the dump,
// or on a failure. The sender itself goes with the migration, after the
// resume (its destructor may wait ~15 ms; see early_mounts.hpp).
void migration::stop_mounts_early() noexcept {
    if (!_mounts_early)
        return;
    _r.mounts_early_source = _mounts_early->stop();
    _r.t_mounts_early_sent = _mounts_early->sent_at_ns();
}

// Sends the destination what it starts its engine's restore from, and waits
// until that restore waits for the images (or the destination says it will
// restore cold). Nothing is frozen yet. No files: nothing to do.
void migration::start_destination_warm(const std::vector<criu::engine_file>& files) {
    if (files.empty())
        return;
    const uint64_t t0 = monotonic_ns();
    send_whole_files(*_dest, FerryControl__IncomingWarm(FERRY_CONTROL__INCOMING_WARM__INIT), files);
    const auto until = net::after(warm_start_limit);
    while (!_dest->buffered() &&
           !net::wait_readable(_dest->fd(),
                               std::min(until, net::after(control::migrator_heartbeat_interval))) &&
           std::chrono::steady_clock::now() < until) {
        check_source_daemon();
        beat("the destination's warm start");
    }
    auto e = control::receive(*_dest, until);
    control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_WARM_READY,
                    "destination " + _opt.destination.to_string());
    const auto& ready = *e->warm_ready;
    _destination_warm = ready.warm;
    _r.engine_restore =
        ready.warm ? "warm" : fmt::format("cold ({})", ready.reason ? ready.reason : "?");
    if (!ready.warm)
        _log->warn("the destination restores the container once the images are in: {}",
                   ready.reason ? ready.reason : "?");
    _log->debug("the destination's warm start took {:.1f} ms", ns_to_ms(monotonic_ns() - t0));
}

// CRIU reads the VMA flags before the freeze: watch the tree from now on
// for calls that could change them. Without a watch the source reads them
// again from the frozen tree, which costs time at the commit.
void migration::watch_vma_flags() {
    if (!_r.criu_features.smaps_before_freeze)
        return;
    std::string why_not;
    const auto ids = proc::probe_watch_tracepoints(why_not);
    try {
        if (!ids)
            throw error(why_not);
        _vma_watch = std::make_unique<proc::vma_flag_watch>(_opt.pid, *ids);
    } catch (const std::exception& e) {
        _r.vma_flags_checked_because = fmt::format("no watch on the tree ({})", e.what());
        _log->info("the source will read the VMA flags again at the commit: {}",
                   _r.vma_flags_checked_because);
    }
}

// The tree is frozen: did anything change its VMA flags since CRIU read them?
void migration::settle_vma_flags() {
    if (!_vma_watch)
        return;
    // The counters stay open until the migration ends: closing a perf event
    // waits for an RCU grace period, about 20 ms each here.
    auto v = _vma_watch->check();
    if (fault_injected(fault::vma_flags_changed))
        v = {false, "a madvise call was injected"};
    if (!v.quiet)
        _r.vma_flags_checked_because = v.why;
}

// Registration comes before the images leave, so the source can serve pages
// as soon as the destination asks; its reply is read afterwards.
void migration::register_with_source() {
    if (fault_injected(fault::migrator_stop_before_register))
        ::raise(SIGSTOP);
    check_source_daemon();
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
    // The one peer that may read the pages: the destination daemon as its
    // certificate names it (parking: nobody but this host).
    const std::string reader = _dest ? _dest->peer_identity() : _opt.credentials->identity();
    reg.destination_identity = const_cast<char*>(reader.c_str());
    reg.has_plaintext_pages = true;
    reg.plaintext_pages = _opt.insecure_plaintext_pages;
    reg.has_check_vma_flags = true;
    reg.check_vma_flags =
        _r.criu_features.smaps_before_freeze && !_r.vma_flags_checked_because.empty();
    control::send_message(*_src, reg, net::after(control_timeout));
    _src_answer_due = true; // outgoing_registered, or why not
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
    beat("the images");
    auto engine_files = _dump->engine_files();
    _r.engine_files_ns = monotonic_ns() - t0;
    beat("the images");
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
        beat("sending the images");
        auto ptrs = piece_pointers(pieces);
        FerryControl__IncomingImages msg = FERRY_CONTROL__INCOMING_IMAGES__INIT;
        msg.n_files = ptrs.size();
        msg.files = ptrs.data();
        msg.has_last = true;
        msg.last = last;
        control::send_message(*_dest, msg, net::after(control_timeout));
        pieces.clear();
    };
    size_t in_frame = 0;
    for (size_t i = 0; i < names.size(); i++) {
        _r.images_bytes += contents[i].size();
        size_t offset = 0;
        do {
            const size_t len = std::min(contents[i].size() - offset, frame_bytes);
            const auto f = file_piece(names[i], contents[i], offset, len);
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
    auto e = control::receive(*_src, net::after(control_timeout));
    control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_REGISTERED, "local daemon");
    _src_answer_due = false;
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

} // namespace ferry::migrator
