// `migrator bench`: Ferry's downtime against the baselines on this machine's
// testbed, with results.json and plots. The measuring and plotting live in
// migrator/bench/ (Python, for Debian's matplotlib); this checks the options
// so a mistake fails at once, then hands over to it.
#pragma once

#include <string>
#include <vector>

namespace ferry::migrator {

struct bench_args {
    std::string workload = "memload";
    std::string engine = "podman"; // for workload container
    std::string network;           // for workload container; empty: the engine's default
    std::string sizes;             // empty: 256M,1G,4G (redis: 1G)
    int runs = 3;
    int warmup = 1;
    std::string methods;         // empty: every method that applies
    std::string fabric = "tcp";  // of Ferry's moves (memload, redis) and the bare link
    std::string raw_link = "on"; // the bare link measured before each size's moves
    std::string fault_fabrics = "tcp,shm";
    std::string fault_threads = "1,4";
    bool fault_precopy = false; // each fault run also with Ferry's --precopy
    std::string fault_size;
    std::string out;
    // Logs of Ferry runs slower than this x their median stay (0: none).
    double slow_logs = 1.5;
};

// Does not return when the bench starts (exec); returns 2 on a bad option or
// a missing driver, saying why.
int run_bench(const bench_args& a);

} // namespace ferry::migrator
