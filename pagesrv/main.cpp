// pagesrv: Ferry's per-host daemon (source and destination roles).
#include "daemon.hpp"
#include "log.hpp"

#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
    std::string listen;
    std::string state_dir = "/var/lib/ferry";
    int drain_seconds = 30;
    CLI::App app{
        "Ferry pagesrv: serves outgoing migrations' pages and accepts incoming migrations"};
    app.add_option("--listen", listen, "address to listen on, IP:PORT")->required();
    app.add_option("--state-dir", state_dir, "where incoming images and logs are kept")
        ->capture_default_str();
    app.add_option("--drain-timeout", drain_seconds,
                   "seconds to let committed migrations finish on SIGTERM")
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    auto log = ferry::make_logger("pagesrv");
    try {
        ferry::pagesrv::daemon_config cfg;
        cfg.listen = ferry::net::parse_endpoint(listen);
        cfg.state_dir = state_dir;
        cfg.drain_timeout = std::chrono::seconds(drain_seconds);
        ferry::pagesrv::daemon d(std::move(cfg));
        d.run();
    } catch (const std::exception& e) {
        log->error("{}", e.what());
        return 1;
    }
    log->info("stopped");
    return 0;
}
