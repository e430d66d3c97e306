// lazy-pages: the destination fault daemon for one restore. Started by
// pagesrv with the restore's image dir as its work dir; reports readiness,
// progress and final statistics to pagesrv over --report-fd, and hands a
// duplicate of every uffd to pagesrv over --uffd-keeper-fd so that a crash of
// this process freezes the restored tasks instead of zero-filling them.
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "criu/criu_image.hpp"
#include "criu_handshake.hpp"
#include "fault_loop.hpp"
#include "pool/pool_channel.hpp"
#include "pool/pool_rebuild.hpp"
#include "precopy_receiver.hpp"
#include "sys/host_tools.hpp"
#include "sys/net.hpp"
#include "tls/credentials.hpp"
#include "transport/page_channel.hpp"
#include "transport/page_holes.hpp"
#include "wire/control.hpp"

#include <atomic>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>
#include <poll.h>
#include <signal.h>

namespace {

using namespace ferry;

struct options {
    std::string images_dir;
    std::string source;
    std::string migration_id;
    int report_fd = -1;
    int keeper_fd = -1;
    lazy::loop_config loop;
    int64_t accept_timeout_ms = 120'000;
    bool wait_start = false;
    std::string fabric = "tcp";
    std::string pool; // pool_spec text: read pages from the pool
    bool keep_pool = false;
    bool precopy = false;        // stage the source's pre-copy (migrator --precopy)
    double deadline_scale = 1.0; // the migration's; lengthens the pool's failure detector
    std::string credentials_dir;
    tls::credentials_ptr credentials; // loaded from credentials_dir in main
};

pool::pool_spec spec_of(const options& opt) {
    auto spec = pool::pool_spec::parse(opt.pool);
    spec.credentials = opt.credentials;
    return spec;
}

// Pool mode: where the pages come from, the rebuild of lost nodes, and what
// the final report says about them.
class pool_source {
  public:
    pool_source(const options& opt, const criu::image_set& images)
        : _spec(spec_of(opt)), _object(_spec.object_of(opt.migration_id)),
          _health(std::make_shared<pool::pool_health>(_spec)), _keep(opt.keep_pool),
          _deadline_scale(opt.deadline_scale) {
        std::vector<const criu::process_image*> procs;
        for (const auto& p : images.processes)
            if (!p.lazy.empty())
                procs.push_back(&p);
        std::sort(procs.begin(), procs.end(),
                  [](const auto* a, const auto* b) { return a->t.pid < b->t.pid; });
        for (const auto* p : procs)
            for (const auto& r : p->lazy)
                _index.add(p->t.pid, r.start, r.end);
        _rebuilder = std::thread([this] { rebuild_loop(); });
    }
    ~pool_source() { stop(); }

    // A channel reading from the pool, with `source` (may be null) for pages
    // the pool does not hold yet.
    std::unique_ptr<page_channel> channel(std::unique_ptr<page_channel> source, uint32_t max_pages,
                                          const char* name) {
        auto ch = std::make_unique<pool_channel>(_spec, _object, _index, _health, std::move(source),
                                                 max_pages, name, _deadline_scale);
        _channels.push_back(ch.get());
        return ch;
    }

    void stop() {
        _stopping = true;
        _health->shut_down();
        if (_rebuilder.joinable())
            _rebuilder.join();
    }

    // After every page is in place: restore the redundancy if a node was
    // lost, then check it. The scrub reads every member, so it can find a
    // loss nobody read into before; that node is rebuilt onto the next
    // spare and the scrub runs again (once per spare at most).
    void finish(spdlog::logger& log) {
        stop();
        if (_health->lost_nodes().empty())
            return drop(log);
        for (size_t round = 0;; round++) {
            _handled = 0;
            rebuild_dead_slots(log, false);
            if (_health->dead_mask()) {
                _scrub_error =
                    "redundancy not restored (no spare left): lost " + _health->lost_nodes();
                break;
            }
            const uint32_t version = _health->version();
            const auto r = pool::scrub(_spec, _object, _index.total_pages(), _health);
            if (r.incomplete) {
                // Every page came in before the source's push was over: the
                // migrator cancels the push, and the pool copy goes.
                log.info("no pool scrub: {} (the source's push is not over)", r.error);
                break;
            }
            _scrubbed = r.stripes;
            _scrub_error = r.ok ? "" : r.error;
            log.info("pool scrub after the loss: {} stripes, {}", r.stripes,
                     r.ok ? "every member present and the parity right" : r.error);
            if (r.ok || _health->version() == version || round >= _spec.spares.size())
                break;
        }
        drop(log);
    }

    void drop(spdlog::logger& log) {
        if (_keep)
            return;
        try {
            pool::pool_client c(pool::current_spec(_spec, *_health), _object, _health,
                                pool::pool_client::options{.name = "drop"});
            c.drop_object();
        } catch (const std::exception& e) {
            log.warn("cannot drop the migration's pages from the pool: {}", e.what());
        }
    }

    void report(FerryControl__TransferStats& t) {
        t.has_pool_pages = t.has_source_pages = t.has_pool_degraded_stripes = true;
        t.has_pool_missed_deadlines = true;
        t.has_pool_one_sided_reads = t.has_pool_one_sided_fallbacks = true;
        for (const auto* ch : _channels) {
            t.pool_pages += ch->stats().pool_pages;
            t.source_pages += ch->stats().source_pages;
            t.pool_degraded_stripes += ch->client_stats().degraded_stripes;
            t.pool_missed_deadlines += ch->client_stats().missed_deadlines;
            t.pool_one_sided_reads += ch->client_stats().one_sided_reads;
            t.pool_one_sided_fallbacks += ch->client_stats().one_sided_fallbacks;
        }
        _lost = _health->lost_nodes();
        _members = _health->members();
        t.pool_lost_nodes = const_cast<char*>(_lost.c_str());
        t.pool_members = const_cast<char*>(_members.c_str());
        t.has_pool_rebuilt_chunks = t.has_pool_rebuild_ns = true;
        t.pool_rebuilt_chunks = _rebuilt_chunks;
        t.pool_rebuild_ns = _rebuild_ns;
        t.has_pool_scrubbed_stripes = true;
        t.pool_scrubbed_stripes = _scrubbed;
        if (!_scrub_error.empty())
            t.pool_scrub_error = const_cast<char*>(_scrub_error.c_str());
    }

  private:
    // A lost node's members are rebuilt onto a spare while faults go on
    // being served degraded.
    void rebuild_loop() {
        auto log = make_logger("lazy-pages");
        while (!_stopping) {
            _health->wait_for_loss(std::chrono::seconds(1), _handled);
            rebuild_dead_slots(*log, true);
        }
    }

    // Rebuilds every dead slot not yet handled onto the next spare; the
    // rebuild thread's pass ends early once stop() is called.
    void rebuild_dead_slots(spdlog::logger& log, bool stops_with_loop) {
        const uint32_t dead = _health->dead_mask();
        for (uint32_t slot = 0; slot < _health->slots() && !(stops_with_loop && _stopping);
             slot++) {
            if (!((dead & ~_handled) >> slot & 1))
                continue;
            _handled |= 1u << slot;
            const auto spare = _health->take_spare();
            if (!spare) {
                log.warn("pool node {} lost and no spare left: reads stay degraded",
                         _health->endpoint(slot).to_string());
                continue;
            }
            log.info("rebuilding pool slot {} onto spare {}", slot, spare->to_string());
            const auto r =
                pool::rebuild_slot(_spec, _object, _index.total_pages(), _health, slot, *spare);
            _rebuilt_chunks += r.chunks;
            _rebuild_ns += r.ns;
            if (r.ok) {
                _handled &= ~(1u << slot); // the spare may be lost in turn
                log.info("rebuilt {} chunks onto {} in {:.1f} ms ({} stripes not pushed yet)",
                         r.chunks, spare->to_string(), ns_to_ms(r.ns), r.stripes_skipped);
            } else {
                log.error("rebuild onto {} failed: {}", spare->to_string(), r.error);
            }
        }
    }

    pool::pool_spec _spec;
    uint64_t _object;
    std::shared_ptr<pool::pool_health> _health;
    bool _keep;
    double _deadline_scale;
    criu::lazy_page_index _index;
    std::vector<pool_channel*> _channels;
    std::atomic<bool> _stopping{false};
    std::atomic<uint64_t> _rebuilt_chunks{0}, _rebuild_ns{0};
    uint32_t _handled = 0; // dead slots already given a spare (or none left)
    uint64_t _scrubbed = 0;
    std::string _scrub_error, _lost, _members;
    std::thread _rebuilder; // last: it uses everything above
};

// Talks to the parent daemon; every send is best effort once the parent is
// gone, because the restored tasks matter more than the report.
class reporter {
  public:
    reporter(int report_fd, int keeper_fd) : _report(report_fd), _keeper(keeper_fd) {}

    void ready() {
        FerryControl__LazyReady r = FERRY_CONTROL__LAZY_READY__INIT;
        send(r);
    }
    // Called under the fault loop's lock, every 200 ms: dropped unless it
    // goes at once. The daemon does not read reports while an engine's
    // restore command ends after the resume; a blocking send into the full
    // socket would hold every fault handler behind that lock (the report fd
    // blocks, so send's deadline cannot end the wait).
    void progress(const lazy::loop_stats& s) {
        if (_report < 0)
            return;
        // POLLOUT on a unix stream socket: at most a quarter of its send
        // buffer in use, so a report of a few dozen bytes fits whole.
        pollfd p{_report, POLLOUT, 0};
        if (::poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))
            return;
        FerryControl__TransferProgress m = FERRY_CONTROL__TRANSFER_PROGRESS__INIT;
        m.pages_done = s.pages_done();
        m.pages_total = s.pages_total;
        send(m);
    }
    void final_stats(const lazy::fault_loop* loop, uint64_t transfer_ns, const std::string& err,
                     pool_source* pool, const lazy::precopy_receiver* precopy) {
        FerryControl__TransferStats t = FERRY_CONTROL__TRANSFER_STATS__INIT;
        std::vector<uint64_t> fault_buckets; // t points into it until sent
        t.ok = err.empty();
        t.error = err.empty() ? nullptr : const_cast<char*>(err.c_str());
        if (loop) {
            const auto& s = loop->stats();
            t.pages_total = s.pages_total;
            t.pages_faulted = s.pages_faulted;
            t.pages_prefetched = s.pages_prefetched;
            t.pages_background = s.pages_background;
            t.pages_zero = s.pages_zero;
            t.has_pages_absent = true;
            t.pages_absent = s.pages_absent;
            t.pages_dropped = s.pages_dropped;
            t.pages_forked = s.pages_forked;
            t.pages_refetched = s.pages_refetched;
            t.bytes_received = loop->bytes_received();
            t.faults = s.faults;
            t.fault_p50_ns = loop->fault_latency().percentile(50);
            t.fault_p99_ns = loop->fault_latency().percentile(99);
            t.fault_max_ns = loop->fault_latency().max();
            t.has_fetch_p50_ns = t.has_fetch_p99_ns = true;
            t.fetch_p50_ns = loop->fetch_latency().percentile(50);
            t.fetch_p99_ns = loop->fetch_latency().percentile(99);
            t.has_install_p50_ns = t.has_install_p99_ns = true;
            t.install_p50_ns = loop->install_latency().percentile(50);
            t.install_p99_ns = loop->install_latency().percentile(99);
            t.processes = s.processes;
            fault_buckets = loop->fault_latency().histogram(latency_buckets_ns);
            t.n_fault_latency_buckets = fault_buckets.size();
            t.fault_latency_buckets = fault_buckets.data();
            t.has_fault_latency_sum_ns = true;
            t.fault_latency_sum_ns = loop->fault_latency().sum();
            t.has_pages_precopied = t.has_pages_precopy_faulted = true;
            t.pages_precopied = s.pages_precopied;
            t.pages_precopy_faulted = s.pages_precopy_faulted;
        }
        std::string precopy_unused; // t points into it until sent
        if (precopy) {
            t.has_precopy_pages_staged = t.has_precopy_pages_valid = true;
            t.precopy_pages_staged = precopy->staged().pages_staged();
            t.precopy_pages_valid = precopy->staged().pages_valid();
            precopy_unused = precopy->unused();
            if (precopy_unused.empty() && !precopy->staged().ready())
                precopy_unused = "the source's last scan did not arrive before the transfer ended";
            t.precopy_unused = precopy_unused.empty() ? nullptr : precopy_unused.data();
        }
        t.transfer_ns = transfer_ns;
        t.has_cpu_ns = true;
        t.cpu_ns = process_cpu_ns();
        if (pool)
            pool->report(t);
        send(t);
    }
    void keep_uffd(int uffd) {
        if (_keeper < 0)
            return;
        try {
            net::send_fd(_keeper, uffd);
        } catch (const std::exception&) {
            // The daemon is gone; nothing can hold the uffd for us.
        }
    }
    [[nodiscard]] int report_fd() const noexcept { return _report; }

  private:
    template <typename Msg>
    void send(Msg& m) {
        if (_report < 0)
            return;
        try {
            control::send_message(_report, m, net::after(std::chrono::seconds(5)));
        } catch (const std::exception&) {
            _report = -1;
        }
    }
    int _report;
    int _keeper;
};

// How long a channel opened ahead of the freeze may wait for the source to
// accept it: the source accepts once the migration registers there, after
// its dump; the daemon kills this process sooner if the migration fails.
constexpr auto early_acceptance_wait = std::chrono::minutes(10);

// `step`, or `none` if it fails and the pool may serve without the source.
template <typename T, typename F>
T unless_pool_serves(const options& opt, spdlog::logger& log, F step, T none) {
    try {
        return step();
    } catch (const std::exception& e) {
        if (opt.pool.empty())
            throw;
        log.warn("no channel to the source ({}); every page must come from the pool", e.what());
        return none;
    }
}

// Asks the source for a channel, or for none if there is no source (a
// parked workload) or it cannot be reached and the pool may serve without it.
std::optional<page_channel_request> ask_source_channel(const options& opt,
                                                       const fabric_spec& fabric,
                                                       FerryControl__ChannelKind kind,
                                                       uint32_t max_pages, spdlog::logger& log) {
    if (opt.source.empty()) {
        if (opt.pool.empty())
            throw error("no source and no pool to read pages from");
        return std::nullopt;
    }
    return unless_pool_serves(
        opt, log,
        [&] {
            return std::optional<page_channel_request>(
                page_channel_request(fabric, net::parse_endpoint(opt.source), opt.credentials,
                                     opt.migration_id, kind, max_pages, std::chrono::seconds(10)));
        },
        std::optional<page_channel_request>());
}

// The channel once the source accepts it. With --wait-start it was asked for
// before the freeze, and the acceptance comes after it.
std::unique_ptr<page_channel> accepted_source_channel(const options& opt,
                                                      std::optional<page_channel_request>& req,
                                                      spdlog::logger& log) {
    if (!req)
        return nullptr;
    return unless_pool_serves(
        opt, log,
        [&] {
            return req->accepted(opt.wait_start ? early_acceptance_wait : std::chrono::seconds(10));
        },
        std::unique_ptr<page_channel>());
}

// The source's holes (transport/page_holes.hpp), on a thread of their own:
// it connects from the start; the small areas' holes come after the commit,
// the others once it asks, after CRIU's restore has finished (their scan
// would take CPU from the restore and the resume where both run on one
// machine). They go to the loop once both are there. Pool mode asks for
// none: the pool's pagemap is exact.
class holes_fetch {
  public:
    holes_fetch(const options& opt, spdlog::logger& log) : _log(log) {
        if (opt.source.empty() || !opt.pool.empty())
            return;
        _thread = std::thread([this, &opt] {
            try {
                auto a = fetch_page_holes(
                    net::parse_endpoint(opt.source), opt.credentials, opt.migration_id,
                    std::chrono::seconds(10), early_acceptance_wait,
                    [this] { return ready_to_ask(); },
                    [this](std::vector<page_hole> h) { deliver(std::move(h)); },
                    [this](net::stream* c) {
                        std::lock_guard lock(_ask_mutex);
                        _conn = _stop ? nullptr : c;
                        if (_stop && c)
                            c->shutdown(); // lazy-pages ends already
                    });
                if (!a.unknown.empty())
                    _log.info("the source cannot tell which lazy pages are holes ({}): the "
                              "others are fetched",
                              a.unknown);
            } catch (const std::exception& e) {
                std::lock_guard lock(_ask_mutex);
                if (!_stop)
                    _log.warn("no holes from the source ({}): every lazy page is fetched",
                              e.what());
            }
        });
    }
    // Joins at once: a thread still waiting to ask gives up, and one waiting
    // for the source's answer (up to early_acceptance_wait, minutes, with the
    // source gone) has its connection shut down. lazy-pages' exit must not
    // wait on it: the daemon kills a lazy-pages that is slow to end.
    ~holes_fetch() {
        {
            std::lock_guard lock(_ask_mutex);
            _stop = true;
            if (_conn)
                _conn->shutdown();
        }
        _asked.notify_all();
        if (_thread.joinable())
            _thread.join();
    }
    // The tasks run: the source may scan now (earlier, its scan took CPU
    // from CRIU's last steps). Called under the loop's lock, so it takes
    // only _ask_mutex (deliver() takes _mutex, then the loop's lock).
    void tasks_run() {
        {
            std::lock_guard lock(_ask_mutex);
            _may_ask = true;
        }
        _asked.notify_all();
    }
    // From now on holes go to `loop` (at once if they are here already).
    void deliver_to(lazy::fault_loop* loop) {
        std::lock_guard lock(_mutex);
        _loop = loop;
        if (_loop && !_holes.empty()) {
            _loop->post_holes(std::move(_holes));
            _holes.clear();
        }
    }

  private:
    bool ready_to_ask() {
        std::unique_lock lock(_ask_mutex);
        _asked.wait_for(lock, early_acceptance_wait, [&] { return _may_ask || _stop; });
        return _may_ask && !_stop;
    }
    void deliver(std::vector<page_hole> holes) {
        std::lock_guard lock(_mutex);
        if (_loop)
            _loop->post_holes(std::move(holes));
        else
            _holes.insert(_holes.end(), holes.begin(), holes.end());
    }

    spdlog::logger& _log;
    std::mutex _mutex;
    std::mutex _ask_mutex;
    std::condition_variable _asked;
    bool _may_ask = false, _stop = false;
    net::stream* _conn = nullptr; // under _ask_mutex: the source's, while open
    lazy::fault_loop* _loop = nullptr;
    std::vector<page_hole> _holes;
    std::thread _thread; // last
};

int run(const options& opt, reporter& report, std::shared_ptr<spdlog::logger> log) {
    // Staged before the freeze, so from the start; destroyed after the loop.
    std::unique_ptr<lazy::precopy_receiver> precopy;
    if (opt.precopy && !opt.source.empty() && opt.pool.empty())
        precopy = std::make_unique<lazy::precopy_receiver>(
            net::parse_endpoint(opt.source), opt.credentials, opt.migration_id,
            std::chrono::seconds(10), early_acceptance_wait, *log);
    std::unique_ptr<pool_source> pool;
    std::unique_ptr<lazy::fault_loop> loop;
    uint64_t start_ns = monotonic_ns();
    // After the loop: destroyed (joined) first.
    holes_fetch holes(opt, *log);
    try {
        // Started ahead of the images (--wait-start): both channels' TLS
        // handshakes happen before the freeze, and the source's acceptances
        // arrive during it, while the images travel; neither falls inside
        // the downtime. (The background channel's handshake used to wait
        // for the fault channel's acceptance: ~3 ms of lazy-pages' start.)
        auto fabric = fabric_spec::parse(opt.fabric);
        fabric.deadline_scale = opt.deadline_scale;
        auto fault_req =
            ask_source_channel(opt, fabric, FERRY_CONTROL__CHANNEL_KIND__FAULT, 64, *log);
        // More than one background stream only where a reply costs this
        // side CPU before its install (tcp: receive, decrypt, verify): a
        // second stream does that while the first installs. A one-sided
        // fabric's replies cost nothing before the install, and a pool
        // reads its own nodes.
        const uint32_t streams =
            fabric.name == "tcp" && opt.pool.empty() ? opt.loop.background_streams : 1;
        std::vector<std::optional<page_channel_request>> bg_reqs;
        for (uint32_t k = 0; k < streams; k++)
            bg_reqs.push_back(ask_source_channel(opt, fabric,
                                                 FERRY_CONTROL__CHANNEL_KIND__BACKGROUND,
                                                 wire::max_pages_per_request, *log));
        auto fault_ch = accepted_source_channel(opt, fault_req, *log);
        std::vector<std::unique_ptr<page_channel>> bg_chs;
        for (auto& req : bg_reqs)
            bg_chs.push_back(accepted_source_channel(opt, req, *log));
        if (opt.wait_start) {
            // Wait until the daemon says go: the images are here.
            auto go = control::receive(opt.report_fd, net::no_deadline);
            control::expect(go.get(), FERRY_CONTROL__ENVELOPE__BODY_LAZY_START, "daemon");
            start_ns = monotonic_ns();
        }
        const auto images = criu::image_set::load(opt.images_dir);
        if (!opt.pool.empty()) {
            pool = std::make_unique<pool_source>(opt, images);
            fault_ch = pool->channel(std::move(fault_ch), 64, "fault");
            bg_chs.front() =
                pool->channel(std::move(bg_chs.front()), wire::max_pages_per_request, "background");
        }
        loop = std::make_unique<lazy::fault_loop>(opt.loop, std::move(fault_ch), std::move(bg_chs));
        if (precopy)
            loop->use_staged(precopy->staged());

        unique_fd listener = lazy::listen_lazy_socket(opt.images_dir);
        report.ready();
        unique_fd restore = lazy::accept_restore(
            listener.get(), std::chrono::milliseconds(opt.accept_timeout_ms), report.report_fd());
        listener.reset();
        lazy::receive_uffds(restore.get(), images.tasks.size(), [&](pid_t pid, unique_fd uffd) {
            const auto* proc = images.find(uint32_t(pid));
            if (!proc)
                throw error(fmt::format("restore sent pid {}, which is not in pstree.img", pid));
            report.keep_uffd(uffd.get());
            loop->add_process(uint32_t(pid), std::move(uffd), proc->lazy);
        });
        loop->watch_restore(std::move(restore));
        if (opt.report_fd >= 0)
            loop->watch_daemon(opt.report_fd);
        holes.deliver_to(loop.get());
        loop->on_progress([&](const lazy::loop_stats& s) { report.progress(s); });
        loop->on_new_uffd([&](int uffd) { report.keep_uffd(uffd); });
        loop->on_main_pass([&holes, &log](uint64_t after_ns, bool told) {
            log->info("main pass from {:.1f} ms after CRIU's \"restore finished\" ({})",
                      double(after_ns) / 1e6,
                      told ? "the daemon says the tasks run" : "the daemon said nothing");
            holes.tasks_run();
        });
        log->info("serving {} processes, {} lazy pages from {}", loop->stats().processes,
                  loop->stats().pages_total, opt.source);
        loop->run();
        loop->announce_done();
        if (pool)
            pool->finish(*log);
        const auto& s = loop->stats();
        log->info("done: {} faulted, {} prefetched, {} background, {} zero, {} holes, {} dropped, "
                  "{} forked, {} refetched, {} from the pre-copy ({} for faults)",
                  s.pages_faulted, s.pages_prefetched, s.pages_background, s.pages_zero,
                  s.pages_absent, s.pages_dropped, s.pages_forked, s.pages_refetched,
                  s.pages_precopied + s.pages_precopy_faulted, s.pages_precopy_faulted);
        log->info("first {}", loop->first().describe());
        report.final_stats(loop.get(), monotonic_ns() - start_ns, "", pool.get(), precopy.get());
        holes.deliver_to(nullptr);
        return 0;
    } catch (const std::exception& e) {
        log->error("{}", e.what());
        report.final_stats(loop.get(), monotonic_ns() - start_ns, e.what(), pool.get(),
                           precopy.get());
        holes.deliver_to(nullptr);
        return 1;
    }
}

} // namespace

int main(int argc, char** argv) {
    options opt;
    CLI::App app{"Ferry lazy-pages: serves one lazy restore's page faults from the source"};
    app.add_option("--images", opt.images_dir, "restore's image and work dir")
        ->required()
        ->check(CLI::ExistingDirectory);
    app.add_option("--source", opt.source,
                   "source daemon, IP:PORT (may be empty in pool mode: a parked workload)")
        ->required();
    app.add_option("--migration", opt.migration_id, "migration id")->required();
    app.add_option("--fabric", opt.fabric, "tcp, or shm[:lat=2us,bw=100gbit]")
        ->capture_default_str();
    app.add_option("--pool", opt.pool,
                   "read pages from this pool: \"raid=5 layout=whole nodes=IP:PORT,... "
                   "[spares=IP:PORT,...]\"");
    app.add_flag("--precopy", opt.precopy,
                 "stage the pages the source streams before the freeze (migrator --precopy) "
                 "and install those still valid at the freeze without fetching them");
    app.add_flag("--keep-pool", opt.keep_pool,
                 "leave the pages in the pool at the end (for inspection)");
    app.add_option("--report-fd", opt.report_fd, "socket to the parent daemon");
    app.add_option("--uffd-keeper-fd", opt.keeper_fd,
                   "socket to pass uffd duplicates to the parent daemon");
    app.add_option("--max-window", opt.loop.max_window_pages,
                   "largest window for a sequential access")
        ->check(CLI::Range(1, 64));
    app.add_option("--window", opt.loop.fault_window_pages,
                   "pages fetched per fault at least (the page and its successors)")
        ->check(CLI::Range(1, 64));
    app.add_option("--background-chunk", opt.loop.background_chunk_pages,
                   "pages per background request")
        ->check(CLI::Range(1, 1024));
    app.add_option("--faulting-chunk", opt.loop.faulting_chunk_pages,
                   "pages per background request while the application faults")
        ->check(CLI::Range(1, 1024));
    app.add_option("--faulting-depth", opt.loop.faulting_depth,
                   "background requests in flight while the application faults")
        ->check(CLI::Range(1, 16));
    app.add_option("--background-depth", opt.loop.background_depth,
                   "background requests in flight (0: none)")
        ->check(CLI::Range(0, 16));
    app.add_option("--background-streams", opt.loop.background_streams,
                   "background channels, each with a thread of its own (tcp without a pool; "
                   "other fabrics use one)")
        ->capture_default_str()
        ->check(CLI::Range(1, 4));
    app.add_option("--early-area-pages", opt.loop.early_area_pages,
                   "areas up to this many pages are pulled first, smallest first");
    app.add_flag("--main-pass-before-resume", opt.loop.main_pass_before_resume,
                 "pull the large areas from CRIU's post-restore on too, not only once the "
                 "tasks run");
    int64_t tasks_run_wait_ms = opt.loop.tasks_run_wait.count();
    app.add_option("--tasks-run-wait-ms", tasks_run_wait_ms,
                   "start the main pass this long after CRIU's \"restore finished\" if the "
                   "daemon has not said the tasks run")
        ->capture_default_str()
        ->check(CLI::Range(0, 60'000));
    app.add_option("--early-total-pages", opt.loop.early_total_pages,
                   "at most this many pages in all are pulled first (0: none)");
    int64_t deadline_ms = opt.loop.fetch_deadline.count();
    app.add_option("--fetch-deadline-ms", deadline_ms,
                   "fail if the source does not answer within this time")
        ->check(CLI::Range(100, 600'000));
    app.add_option("--faulting-threshold", opt.loop.faulting_threshold,
                   "faults per 2 ms that make the background step back (0: never)");
    app.add_option("--handlers", opt.loop.handlers,
                   "fault handler threads, each pinned to one allowed CPU, at most one per CPU "
                   "(0: one per allowed CPU)")
        ->check(CLI::Range(0, 1024));
    int64_t spin_us = opt.loop.spin.count();
    app.add_option("--spin-us", spin_us,
                   "poll without sleeping this long after any activity (0: always block)")
        ->check(CLI::Range(0, 1'000'000));
    app.add_option("--deadline-scale", opt.deadline_scale,
                   "the migration's --deadline-scale: multiplies the source's fetch deadline, "
                   "the pool nodes' reply deadlines, the silence after which a node is lost, "
                   "and how long an RDMA peer's silence is waited out (never below the "
                   "defaults)")
        ->check(CLI::Range(0.01, 1000.0));
    app.add_option("--accept-timeout-ms", opt.accept_timeout_ms,
                   "how long to wait for restore to connect");
    app.add_flag("--wait-start", opt.wait_start,
                 "wait for lazy_start on --report-fd before reading the images");
    app.add_option("--credentials", opt.credentials_dir,
                   "TLS credentials directory (ca.pem, cert.pem, key.pem; default "
                   "$FERRY_CREDENTIALS, then /etc/ferry/credentials)");
    CLI11_PARSE(app, argc, argv);
    configure_logging(log_level_from_environment());
    opt.loop.fetch_deadline =
        std::chrono::milliseconds(int64_t(double(deadline_ms) * std::max(1.0, opt.deadline_scale)));
    opt.loop.tasks_run_wait = std::chrono::milliseconds(tasks_run_wait_ms);
    opt.loop.copy_quiet_wait = std::chrono::milliseconds(
        int64_t(double(opt.loop.copy_quiet_wait.count()) * std::max(1.0, opt.deadline_scale)));
    opt.loop.spin = std::chrono::microseconds(spin_us);

    // No parent-death signal: if the daemon dies, the restored tasks still
    // need their pages, and this process can still serve them.
    ::signal(SIGPIPE, SIG_IGN);
    auto log = make_logger("lazy-pages");
    reporter report(opt.report_fd, opt.keeper_fd);
    try {
        opt.credentials = tls::credentials::load(tls::credentials_dir(opt.credentials_dir));
    } catch (const std::exception& e) {
        log->error("{}", e.what());
        report.final_stats(nullptr, 0, e.what(), nullptr, nullptr);
        return 1;
    }
    return run(opt, report, log);
}
