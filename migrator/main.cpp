// migrator: Ferry's command line.
#include "bench_cmd.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "credentials_cmd.hpp"
#include "engine.hpp"
#include "migrate.hpp"
#include "park.hpp"
#include "pool/pool_client.hpp"
#include "report.hpp"
#include "status.hpp"
#include "tls/credentials.hpp"

#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

namespace {

using namespace ferry;

struct pool_args {
    std::string nodes, spares, layout = "whole";
    std::string raid = "5";
};

struct run_args {
    migrator::migrate_mode mode = migrator::migrate_mode::migrate;
    std::string name; // checkpoint, restore
    std::string to, via, advertise, work_root = "/dev/shm/ferry", fabric = "tcp";
    pid_t pid = 0;
    std::string container, engine = engines::names().front();
    pool_args pool;
    bool json = false, keep_images = false, tcp_close = false, plaintext_pages = false;
    bool precopy = false;
    double precopy_wait_s = 30;
    std::string credentials;                // --credentials
    std::vector<std::string> restorable_by; // checkpoint
    double deadline_scale = 1.0;
    bool no_hw_breakpoints = false;
    bool no_idle_poll = false;
    std::string criu_config; // a file of extra CRIU options
};

// Options every command that freezes or restores a workload takes.
void add_criu_options(CLI::App* cmd, run_args& a) {
    cmd->add_option("--deadline-scale", a.deadline_scale,
                    "multiply every deadline on CRIU (they grow with the workload's memory)")
        ->check(CLI::Range(0.01, 100.0))
        ->capture_default_str();
    cmd->add_flag("--no-hw-breakpoints", a.no_hw_breakpoints,
                  "make CRIU step through syscalls instead of using hardware breakpoints, on "
                  "both hosts (default: only where they do not trap; $FERRY_NO_HW_BREAKPOINTS=1)");
    cmd->add_flag("--no-idle-poll", a.no_idle_poll,
                  "let idle CPUs halt through the downtime, on both hosts (default: they poll "
                  "from before the freeze to the resume, at most 10 s; $FERRY_NO_IDLE_POLL=1)");
    cmd->add_option("--criu-config", a.criu_config,
                    "a file of extra CRIU options (config-file syntax) for the source's dump")
        ->check(CLI::ExistingFile);
}

int run_migrate(const run_args& a) {
    migrator::migrate_options opt;
    const auto& pool = a.pool;
    try {
        opt.credentials = tls::credentials::load(tls::credentials_dir(a.credentials));
        if (!pool.nodes.empty()) {
            pool::pool_spec spec;
            spec.nodes = pool::pool_spec::parse_nodes(pool.nodes);
            if (!pool.spares.empty())
                spec.spares = pool::pool_spec::parse_nodes(pool.spares);
            spec.level = raid::parse_level(pool.raid);
            spec.kind = pool::parse_stripe_kind(pool.layout);
            if (a.mode != migrator::migrate_mode::unpark)
                (void)spec.layout(); // the level must fit the nodes
            spec.credentials = opt.credentials;
            opt.pool = spec;
        }
        opt.mode = a.mode;
        opt.park_name = a.name;
        if (a.mode != migrator::migrate_mode::migrate)
            migrator::check_park_name(a.name);
        opt.pid = a.pid;
        opt.container = a.container;
        opt.engine = a.container.empty() ? "" : a.engine;
        if (a.mode == migrator::migrate_mode::migrate)
            opt.destination = net::parse_endpoint(a.to);
        else if (a.mode == migrator::migrate_mode::unpark)
            opt.destination = net::parse_endpoint(a.to.empty() ? a.via : a.to);
        opt.local_daemon = net::parse_endpoint(a.via);
        opt.fabric = fabric_spec::parse(a.fabric);
        if (!a.advertise.empty())
            opt.advertised_source = net::parse_endpoint(a.advertise);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "migrator: %s\n", e.what());
        return 2;
    }
    opt.work_root = a.work_root;
    try {
        opt.tools = host_tools::from_environment();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "migrator: %s\n", e.what());
        return 2;
    }
    opt.deadline_scale = a.deadline_scale;
    opt.no_hw_breakpoints = a.no_hw_breakpoints;
    opt.idle_poll = !a.no_idle_poll;
    if (!a.criu_config.empty()) {
        std::ifstream in(a.criu_config);
        opt.criu_config_extra.assign(std::istreambuf_iterator<char>(in), {});
        if (!opt.criu_config_extra.empty() && opt.criu_config_extra.back() != '\n')
            opt.criu_config_extra += '\n';
    }
    opt.keep_images = a.keep_images;
    opt.tcp_close = a.tcp_close;
    opt.insecure_plaintext_pages = a.plaintext_pages;
    opt.precopy = a.precopy;
    opt.precopy_wait = std::chrono::milliseconds(int64_t(a.precopy_wait_s * 1000));
    opt.restorable_by = a.restorable_by;
    opt.show_progress = !a.json && ::isatty(STDERR_FILENO);
    const auto result = migrator::migrate(opt, [&](const migrator::migration_result& r) {
        if (a.json)
            std::cout << migrator::to_json(r).dump() << std::endl;
        else
            std::cout << migrator::human_summary(r) << std::flush;
    });
    return result.ok ? 0 : 1;
}

// `migrator pool stats --node IP:PORT`: a pool node's counters, as JSON.
int run_pool_stats(const std::string& node, const std::string& credentials) {
    try {
        pool::pool_spec spec;
        spec.credentials = tls::credentials::load(tls::credentials_dir(credentials));
        spec.nodes = {net::parse_endpoint(node)};
        spec.level = raid::level::raid0;
        auto health = std::make_shared<pool::pool_health>(spec);
        pool::pool_client c(spec, 0, health, pool::pool_client::options{.name = "stats"});
        if (health->dead(0))
            throw error("cannot reach pool node " + health->lost_nodes());
        const auto text = c.node_stats(0);
        if (text.rfind("error", 0) == 0)
            throw error(text);
        std::cout << text << std::endl;
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "migrator: %s\n", e.what());
        return 1;
    }
}

} // namespace

int main(int argc, char** argv) {
    ::signal(SIGPIPE, SIG_IGN);
    struct sigaction sa {};
    sa.sa_handler = [](int) { ferry::migrator::request_interrupt(); };
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    // A migrator stopped from its terminal (Ctrl-Z, or a background write
    // or read) would hold the source frozen for as long as it stays
    // stopped: CRIU and the source daemon wait on it, and its host still
    // answers. Ctrl-C is the way to end a migration.
    for (const int sig : {SIGTSTP, SIGTTIN, SIGTTOU})
        ::signal(sig, SIG_IGN);
    CLI::App app{"Ferry: post-copy live migration of containers and process trees"};
    app.require_subcommand(1);
    // Every command: where this host's credentials are. Subcommands made
    // after fallthrough() pass it up, so it goes anywhere on the line.
    std::string credentials;
    app.add_option("--credentials", credentials,
                   "TLS credentials directory: ca.pem, cert.pem, key.pem (default "
                   "$FERRY_CREDENTIALS, then /etc/ferry/credentials)");
    app.fallthrough();

    auto* mig = app.add_subcommand(
        "migrate", "migrate a container or a process tree to another host, post-copy");
    run_args a;
    const char* env_daemon = std::getenv("FERRY_DAEMON");
    a.via = env_daemon ? env_daemon : "127.0.0.1:7140";
    a.no_hw_breakpoints = switch_from_environment("FERRY_NO_HW_BREAKPOINTS");
    a.no_idle_poll = switch_from_environment("FERRY_NO_IDLE_POLL");
    auto& pool = a.pool;
    auto* pid_opt =
        mig->add_option("--pid", a.pid,
                        "root of a process tree; must be the init of its own PID namespace")
            ->check(CLI::PositiveNumber);
    auto* ctr_opt = mig->add_option("--container", a.container,
                                    "a running container of --engine; it keeps its name on the "
                                    "destination and is removed here once it runs there");
    pid_opt->excludes(ctr_opt);
    mig->add_option("--engine", a.engine, "the container's engine")
        ->check(CLI::IsMember(engines::names()))
        ->capture_default_str();
    mig->callback([&] {
        if (a.pid == 0 && a.container.empty())
            throw CLI::ValidationError("migrate", "give --pid or --container");
    });
    mig->add_option("--to", a.to, "the destination host's pagesrv, IP:PORT")->required();
    mig->add_option("--via", a.via,
                    "this host's pagesrv, IP:PORT (default $FERRY_DAEMON or 127.0.0.1:7140)");
    mig->add_option("--advertise", a.advertise,
                    "the address the destination uses to reach this host's pagesrv");
    mig->add_option("--work-dir", a.work_root, "where dump images are written (tmpfs is best)")
        ->capture_default_str();
    mig->add_option("--fabric", a.fabric,
                    "tcp, or shm[:lat=2us,bw=100gbit] (an emulated one-sided fabric)")
        ->capture_default_str();
    mig->add_option("--pool", pool.nodes,
                    "pool mode: push the pages into these pool nodes, IP:PORT,IP:PORT,...; the "
                    "source ends as soon as they hold every page");
    mig->add_option("--raid", pool.raid, "the pool's RAID level: 0, 1, 5 or 6")
        ->capture_default_str();
    mig->add_option("--pool-spare", pool.spares,
                    "spare pool nodes a lost node's pages are rebuilt onto, IP:PORT,...");
    mig->add_option("--pool-layout", pool.layout,
                    "whole: whole pages spread over the nodes; split: each page cut across them")
        ->capture_default_str();
    mig->add_flag("--json", a.json, "print one JSON object instead of a summary");
    mig->add_flag("--tcp-close", a.tcp_close,
                  "close the workload's established TCP connections instead of failing on "
                  "them (its clients reconnect to the destination)");
    mig->add_flag("--keep-images", a.keep_images,
                  "keep the dump images after a successful migration");
    add_criu_options(mig, a);

    auto* ckpt = app.add_subcommand(
        "checkpoint",
        "park a process tree in the memory pool: it ends here once the pool holds it");
    run_args park;
    park.mode = migrator::migrate_mode::park;
    park.via = a.via;
    park.no_hw_breakpoints = a.no_hw_breakpoints;
    park.no_idle_poll = a.no_idle_poll;
    ckpt->add_option("--pid", park.pid, "root of the process tree (init of its PID namespace)")
        ->required()
        ->check(CLI::PositiveNumber);
    ckpt->add_option("--to-pool", park.pool.nodes, "the pool's nodes, IP:PORT,IP:PORT,...")
        ->required();
    ckpt->add_option("--name", park.name, "what to call the parked workload")->required();
    ckpt->add_option("--restorable-by", park.restorable_by,
                     "hosts (certificate names) that may restore it besides this one "
                     "(repeatable; the pool serves it to no one else)")
        ->delimiter(',');
    ckpt->add_option("--raid", park.pool.raid, "RAID level of its pages: 0, 1, 5 or 6")
        ->capture_default_str();
    ckpt->add_option("--pool-spare", park.pool.spares,
                     "spare pool nodes for rebuilds during the later restore, IP:PORT,...");
    ckpt->add_option("--pool-layout", park.pool.layout, "whole or split")->capture_default_str();
    ckpt->add_option("--via", park.via, "this host's pagesrv, IP:PORT (default $FERRY_DAEMON)");
    ckpt->add_option("--work-dir", park.work_root, "where dump images are written")
        ->capture_default_str();
    ckpt->add_flag("--json", park.json, "print one JSON object instead of a summary");
    add_criu_options(ckpt, park);

    auto* rest = app.add_subcommand(
        "restore", "bring a parked workload back from the memory pool, post-copy, on any host");
    run_args unpark;
    unpark.mode = migrator::migrate_mode::unpark;
    unpark.via = a.via;
    unpark.no_hw_breakpoints = a.no_hw_breakpoints;
    unpark.no_idle_poll = a.no_idle_poll;
    rest->add_option("--from-pool", unpark.pool.nodes,
                     "the pool's nodes, IP:PORT,..., in the order given at the checkpoint")
        ->required();
    rest->add_option("--name", unpark.name, "the parked workload")->required();
    rest->add_option("--to", unpark.to,
                     "the pagesrv of the host to restore on (default: this host's, $FERRY_DAEMON)");
    rest->add_flag("--json", unpark.json, "print one JSON object instead of a summary");
    add_criu_options(rest, unpark);

    auto* status_cmd = app.add_subcommand(
        "status", "list the migrations in flight on this host: phase, age, pids");
    bool status_json = false;
    status_cmd->add_flag("--json", status_json, "print one JSON object");
    auto* abort_cmd = app.add_subcommand(
        "abort", "end a migration in flight before its commit; the source workload runs on");
    std::string abort_id;
    int abort_wait = 120;
    bool abort_json = false;
    abort_cmd->add_option("ID", abort_id, "the migration's id, or the start of it (see status)")
        ->required();
    abort_cmd
        ->add_option("--wait", abort_wait,
                     "seconds to let its migrator abort before releasing the workload here")
        ->capture_default_str();
    abort_cmd->add_flag("--json", abort_json, "print one JSON object");

    auto* pool_cmd = app.add_subcommand("pool", "inspect the memory pool");
    pool_cmd->require_subcommand(1);
    auto* pool_stats = pool_cmd->add_subcommand("stats", "print a pool node's counters as JSON");
    std::string stats_node;
    pool_stats->add_option("--node", stats_node, "the pool node, IP:PORT")->required();

    auto* cred_cmd = app.add_subcommand(
        "credentials", "create the cluster CA and host certificates that authenticate Ferry");
    cred_cmd->require_subcommand(1);
    auto* cred_init = cred_cmd->add_subcommand("init", "create a cluster CA in the directory");
    auto* cred_issue =
        cred_cmd->add_subcommand("issue", "sign a certificate for HOST with the cluster CA");
    std::string issue_host;
    std::vector<std::string> issue_addresses, issue_dns;
    std::string issue_out;
    cred_issue
        ->add_option("HOST", issue_host,
                     "the host's name (its identity) or address; an address also goes in the "
                     "certificate's subject alternative name")
        ->required();
    cred_issue->add_option("--address", issue_addresses,
                           "another IP address the host is dialled at (repeatable)");
    cred_issue->add_option("--dns", issue_dns, "another DNS name of the host (repeatable)");
    cred_issue->add_option("--out", issue_out,
                           "where to write ca.pem, cert.pem and key.pem (default: the "
                           "credentials directory itself, i.e. this host)");

    auto* bench_cmd = app.add_subcommand(
        "bench", "measure Ferry's downtime against stop-and-copy and CRIU's lazy dump on this "
                 "machine's testbed; writes results.json and plots");
    migrator::bench_args bench;
    bench_cmd
        ->add_option("--workload", bench.workload,
                     "what to migrate: memload (a bare process tree), container (memload in a "
                     "container of --engine) or redis (Redis in a container, under a client)")
        ->check(CLI::IsMember({"memload", "redis", "container"}))
        ->capture_default_str();
    bench_cmd->add_option("--engine", bench.engine, "the engine of --workload container|redis")
        ->check(CLI::IsMember({"podman", "docker"}))
        ->capture_default_str();
    bench_cmd->add_option("--network", bench.network,
                          "the container's network (--workload container; default the "
                          "engine's): `ferry` is the testbed's container network");
    bench_cmd->add_option("--sizes", bench.sizes,
                          "memory sizes, comma-separated (M or G); default 256M,1G,4G, for "
                          "redis one size, 1G");
    bench_cmd->add_option("--runs", bench.runs, "repetitions of each measurement")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    bench_cmd
        ->add_option("--warmup", bench.warmup,
                     "unrecorded runs of each contender, at the smallest size, before the "
                     "measured ones (the first move after a cold start is an outlier)")
        ->check(CLI::Range(0, 10))
        ->capture_default_str();
    bench_cmd->add_option("--methods", bench.methods,
                          "the downtime contenders, comma-separated (default: all that apply); "
                          "memload: ferry, stop_and_copy, criu_lazy_dump; container: ferry, "
                          "bare_process, podman_checkpoint (podman), docker_checkpoint (docker)");
    bench_cmd
        ->add_option("--fabric", bench.fabric,
                     "the fabric of Ferry's moves (memload, redis) and of the bare link goal 3 "
                     "sets them against")
        ->check(CLI::IsMember({"tcp", "shm"}))
        ->capture_default_str();
    bench_cmd
        ->add_option("--raw-link", bench.raw_link,
                     "measure the bare link before each size's Ferry moves, goal 3's yardstick "
                     "(off: moves only; on a VM the link's gigabytes into fresh memory can slow "
                     "the moves right after it)")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    bench_cmd
        ->add_option("--fault-fabrics", bench.fault_fabrics,
                     "fabrics for the fault-latency CDF, comma-separated (empty: none)")
        ->capture_default_str();
    bench_cmd
        ->add_option("--fault-threads", bench.fault_threads,
                     "threads touching the pages in the fault-latency runs, comma-separated")
        ->capture_default_str();
    bench_cmd->add_flag("--fault-precopy", bench.fault_precopy,
                        "also measure each fault run with Ferry's --precopy");
    bench_cmd->add_option("--fault-size", bench.fault_size,
                          "memory of the fault-latency runs (default: the smallest size)");
    bench_cmd->add_option("--out", bench.out,
                          "directory for results.json and the plots (default ./ferry-bench-DATE)");
    bench_cmd
        ->add_option("--slow-logs", bench.slow_logs,
                     "keep CRIU's and lazy-pages' logs of the Ferry runs whose downtime exceeds "
                     "FACTOR x the median of their method and size, in OUT/slow-runs (memload and "
                     "container workloads; 0: keep none)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();

    mig->add_flag("--precopy", a.precopy,
                  "before the freeze, stream the workload's memory to the destination, then "
                  "what it writes, round after round; after the freeze only what it wrote in "
                  "the last round is fetched");
    mig->add_option("--precopy-wait", a.precopy_wait_s,
                    "with --precopy: freeze once the rounds stop shrinking, or after this many "
                    "seconds")
        ->check(CLI::Range(0.0, 600.0))
        ->capture_default_str();
    mig->add_flag("--insecure-plaintext-pages", a.plaintext_pages,
                  "page data crosses the network unencrypted (authentication stays on): "
                  "only inside a trusted network");

    CLI11_PARSE(app, argc, argv);
    configure_logging(log_level_from_environment());
    a.credentials = park.credentials = unpark.credentials = credentials;
    if (cred_init->parsed())
        return migrator::run_credentials_init(tls::credentials_dir(credentials));
    if (cred_issue->parsed())
        return migrator::run_credentials_issue(tls::credentials_dir(credentials), issue_host,
                                               issue_addresses, issue_dns, issue_out);
    if (bench_cmd->parsed())
        return migrator::run_bench(bench);
    if (pool_stats->parsed())
        return run_pool_stats(stats_node, credentials);
    if (status_cmd->parsed())
        return migrator::run_status(status_json);
    if (abort_cmd->parsed())
        return migrator::run_abort(abort_id, std::chrono::seconds(abort_wait), abort_json);
    if (mig->parsed())
        return run_migrate(a);
    if (ckpt->parsed())
        return run_migrate(park);
    if (rest->parsed())
        return run_migrate(unpark);
    return 2;
}
