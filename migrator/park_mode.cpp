#include "migration.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "criu/criu_image.hpp"
#include "criu/criu_page_server.hpp"
#include "criu/criu_rpc.hpp"
#include "criu/workload_release.hpp"
#include "pool/pool_client.hpp"
#include "sys/hw_breakpoints.hpp"
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

// Park: the pool takes every page (the source's push) and the record with
// the images (from here); only then is the source committed and its dump
// closed. Anything failing before that resumes the source and removes what
// reached the pool.
void migration::park() {
    set_phase("parking");
    register_with_source();
    const auto images = collect_images();
    std::vector<FerryControl__ImageFile> files;
    for (size_t i = 0; i < images.names.size(); i++) {
        files.push_back(
            file_piece(images.names[i], images.contents[i], 0, images.contents[i].size()));
        _r.images_bytes += files.back().data.len;
    }
    auto ptrs = piece_pointers(files);
    _r.image_files = uint32_t(files.size());
    wait_registered();
    const std::string criu_version = criu::require_supported_criu(_opt.tools.criu).to_string();
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
    _r.park_record_bytes = store_record(*_opt.pool, rec);
    share_parked();
    _r.t_images_sent = monotonic_ns();

    request_handoff();
    _handoff_pending = true; // an abort meanwhile may cross its answer
    // The push of the whole memory: as long as it takes (the pool client
    // bounds every node's answer), but Ctrl-C or SIGTERM still aborts it.
    while (!_src->buffered() && !net::wait_readable(_src->fd(), net::after(abort_poll * 10)))
        check_interrupt();
    const bool pushed = receive_handoff(net::after(control_timeout));
    _handoff_pending = false;
    if (!pushed)
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
    _parked = load_record(*_opt.pool, _opt.park_name);
    if (!_parked)
        throw error(fmt::format("no workload named '{}' is parked in the pool {}", _opt.park_name,
                                record_spec(*_opt.pool).to_string()));
    _opt.pool = pool::pool_spec::parse(_parked->pool);
    _opt.pool->credentials = _opt.credentials;
    _r.pool = _parked->pool;
    _r.source_pid = pid_t(_parked->has_source_pid ? _parked->source_pid : 0);
    _r.source_pages_total = _parked->pages_total;
}

// A parked workload is this host's; --restorable-by names the hosts that may
// restore it too: they become members of its record and of its pages.
void migration::share_parked() {
    if (_opt.restorable_by.empty())
        return;
    auto record = record_spec(*_opt.pool);
    auto pages = *_opt.pool;
    const std::pair<pool::pool_spec*, uint64_t> objects[] = {
        {&record, record_object(_opt.park_name)}, {&pages, pages.object_of(_r.id)}};
    for (const auto& [spec, object] : objects) {
        auto health = std::make_shared<pool::pool_health>(*spec);
        pool::pool_client c(*spec, object, health, pool::pool_client::options{.name = "share"});
        for (const auto& host : _opt.restorable_by)
            if (c.grant(host) == health->slots())
                throw error(
                    fmt::format("the pool refused to let {} restore '{}'", host, _opt.park_name));
    }
}

// The pool serves the parked pages only to the object's members (this host,
// if it parked them): the destination daemon becomes one.
void migration::grant_parked_pages() {
    const std::string reader = _dest->peer_identity();
    auto health = std::make_shared<pool::pool_health>(*_opt.pool);
    pool::pool_client c(*_opt.pool, _opt.pool->object_of(_r.id), health,
                        pool::pool_client::options{.name = "grant"});
    const uint32_t refused = c.grant(reader);
    if (refused == health->slots())
        throw error(fmt::format("the pool did not let {} read the parked pages: only the host that "
                                "parked them (or one it let in) may restore them",
                                reader));
    if (refused)
        _log->warn("{} pool node(s) did not let {} read the parked pages", refused, reader);
}

// No source: the images come from the parked record, the pages from the pool.
void migration::run_unpark() {
    try {
        load_parked();
        connect_destination("");
        grant_parked_pages();
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
        drop_record(*_opt.pool, _opt.park_name); // no longer parked: it runs
    } catch (const std::exception& e) {
        _r.error = e.what();
    }
}

// Before the freeze: the name (checked by the CLI) must be free; the pages
// get an object id that the record can name.
void migration::reserve_park_name() {
    if (load_record(*_opt.pool, _opt.park_name))
        throw error(
            fmt::format("a workload named '{}' is already parked in this pool", _opt.park_name));
    _opt.pool->object = pool::object_for(_r.id);
    _r.pool = _opt.pool->to_string();
}

} // namespace ferry::migrator
