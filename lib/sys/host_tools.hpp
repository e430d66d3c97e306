// The programs Ferry runs and the settings an operator gives them through
// the environment, read once by each binary's main() (from_environment) and
// passed down from there: no helper reads the environment itself.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

struct host_tools {
    std::string criu = "criu";     // $FERRY_CRIU
    std::string podman = "podman"; // $FERRY_PODMAN
    std::string docker = "docker"; // $FERRY_DOCKER, the CLI
    // CRIU's log level for the dumps and restores Ferry runs itself (0-4,
    // $FERRY_CRIU_LOG_LEVEL). Each line is a write(2) of ~2.5 µs, and most
    // of a dump's or restore's lines fall in the downtime. 2, CRIU's own
    // default, keeps every warning and error; 3 (info) adds each step with
    // its timestamp, ~2.5 ms more of a podman container's downtime
    // (README, Benchmarks); 4 (debug) adds per-VMA, per-mount and per-file
    // detail.
    int criu_log_level = 2;
    // dockerd's socket: $DOCKER_HOST (unix:// only), else /var/run/docker.sock.
    std::string docker_socket = "/var/run/docker.sock";
    // Ferry's CRIU plugin (ferry_criu.so): $FERRY_CRIU_PLUGIN_DIR, the build
    // tree beside this binary, or the installed lib/ferry/criu; none if
    // absent (CRIU then runs without it).
    std::optional<std::filesystem::path> criu_plugin_dir;
    // Ferry's runc shim: $FERRY_RUNC_SHIM, beside this binary, or in the
    // build tree; empty if not found (engine restores then fail, saying so).
    std::string runc_shim;
    // The fault daemon: $FERRY_LAZY_PAGES, beside pagesrv, or in the build tree.
    std::string lazy_pages;
    // Extra lazy-pages options for tuning experiments: $FERRY_LAZY_PAGES_ARGS.
    std::vector<std::string> lazy_pages_args;
    // CRIU's fault injection as the operator set it (Ferry never overrides it).
    std::optional<std::string> criu_fault;

    // Throws ferry::error for a malformed setting (DOCKER_HOST of another scheme).
    static host_tools from_environment();
};

// An operator's on/off switch such as $FERRY_NO_HW_BREAKPOINTS: on when it
// is "1". The default of the command-line flag of the same meaning.
[[nodiscard]] bool switch_from_environment(const char* name) noexcept;

// $FERRY_LOG (trace, debug, info, warn, err), for configure_logging.
[[nodiscard]] const char* log_level_from_environment() noexcept;

} // namespace ferry
