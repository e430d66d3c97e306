// migrator: Ferry's command line.
#include "error.hpp"
#include "log.hpp"
#include "migrate.hpp"
#include "pool_client.hpp"
#include "report.hpp"

#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace {

using namespace ferry;

struct pool_args {
    std::string nodes, spares, layout = "whole";
    std::string raid = "5";
};

int run_migrate(const std::string& to, const std::string& via, const std::string& advertise,
                pid_t pid, const std::string& work_root, const std::string& fabric,
                const pool_args& pool, bool json, bool keep_images) {
    migrator::migrate_options opt;
    try {
        if (!pool.nodes.empty()) {
            pool::pool_spec spec;
            spec.nodes = pool::pool_spec::parse_nodes(pool.nodes);
            if (!pool.spares.empty())
                spec.spares = pool::pool_spec::parse_nodes(pool.spares);
            spec.level = raid::parse_level(pool.raid);
            spec.kind = pool::parse_stripe_kind(pool.layout);
            (void)spec.layout(); // the level must fit the nodes
            opt.pool = spec;
        }
        opt.pid = pid;
        opt.destination = net::parse_endpoint(to);
        opt.local_daemon = net::parse_endpoint(via);
        opt.fabric = fabric_spec::parse(fabric);
        if (!advertise.empty())
            opt.advertised_source = net::parse_endpoint(advertise);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "migrator: %s\n", e.what());
        return 2;
    }
    opt.work_root = work_root;
    opt.keep_images = keep_images;
    opt.show_progress = !json && ::isatty(STDERR_FILENO);
    auto result = migrator::migrate(opt);
    if (json)
        std::cout << migrator::to_json(result).dump() << std::endl;
    else
        std::cout << migrator::human_summary(result);
    return result.ok ? 0 : 1;
}

// `migrator pool stats --node IP:PORT`: a pool node's counters, as JSON.
int run_pool_stats(const std::string& node) {
    try {
        pool::pool_spec spec;
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
    CLI::App app{"Ferry: post-copy live migration of containers and process trees"};
    app.require_subcommand(1);

    auto* mig = app.add_subcommand("migrate", "migrate a process tree to another host, post-copy");
    pid_t pid = 0;
    std::string to, advertise, work_root = "/dev/shm/ferry";
    const char* env_daemon = std::getenv("FERRY_DAEMON");
    std::string via = env_daemon ? env_daemon : "127.0.0.1:7140";
    bool json = false, keep_images = false;
    std::string fabric = "tcp";
    mig->add_option("--pid", pid,
                    "root of the process tree; must be the init of its own PID namespace")
        ->required()
        ->check(CLI::PositiveNumber);
    mig->add_option("--to", to, "the destination host's pagesrv, IP:PORT")->required();
    mig->add_option("--via", via,
                    "this host's pagesrv, IP:PORT (default $FERRY_DAEMON or 127.0.0.1:7140)");
    mig->add_option("--advertise", advertise,
                    "the address the destination uses to reach this host's pagesrv");
    mig->add_option("--work-dir", work_root, "where dump images are written (tmpfs is best)")
        ->capture_default_str();
    mig->add_option("--fabric", fabric,
                    "tcp, or shm[:lat=2us,bw=100gbit] (an emulated one-sided fabric)")
        ->capture_default_str();
    pool_args pool;
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
    mig->add_flag("--json", json, "print one JSON object instead of a summary");
    mig->add_flag("--keep-images", keep_images,
                  "keep the dump images after a successful migration");

    auto* pool_cmd = app.add_subcommand("pool", "inspect the memory pool");
    pool_cmd->require_subcommand(1);
    auto* pool_stats = pool_cmd->add_subcommand("stats", "print a pool node's counters as JSON");
    std::string stats_node;
    pool_stats->add_option("--node", stats_node, "the pool node, IP:PORT")->required();

    CLI11_PARSE(app, argc, argv);
    if (pool_stats->parsed())
        return run_pool_stats(stats_node);
    if (mig->parsed())
        return run_migrate(to, via, advertise, pid, work_root, fabric, pool, json, keep_images);
    return 2;
}
