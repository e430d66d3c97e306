#include "bench_cmd.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace ferry::migrator {

namespace {

constexpr const char* debian_python = "/usr/bin/python3";

// $FERRY_BENCH_DIR, else the source tree this binary was built from.
std::filesystem::path driver() {
    if (const char* d = std::getenv("FERRY_BENCH_DIR"); d && *d)
        return std::filesystem::path(d) / "bench.py";
    return std::filesystem::path(FERRY_SOURCE_ROOT) / "migrator" / "bench" / "bench.py";
}

} // namespace

int run_bench(const bench_args& a) {
    const auto script = driver();
    if (!std::filesystem::exists(script)) {
        std::fprintf(stderr, "migrator bench: %s is missing (set FERRY_BENCH_DIR)\n",
                     script.c_str());
        return 2;
    }
    std::vector<std::string> argv = {"python3",         script.string(),
                                     "--workload",      a.workload,
                                     "--engine",        a.engine,
                                     "--runs",          std::to_string(a.runs),
                                     "--warmup",        std::to_string(a.warmup),
                                     "--fabric",        a.fabric,
                                     "--raw-link",      a.raw_link,
                                     "--fault-fabrics", a.fault_fabrics,
                                     "--fault-threads", a.fault_threads,
                                     "--slow-logs",     fmt::format("{}", a.slow_logs)};
    if (!a.network.empty())
        argv.insert(argv.end(), {"--network", a.network});
    if (!a.sizes.empty())
        argv.insert(argv.end(), {"--sizes", a.sizes});
    if (!a.methods.empty())
        argv.insert(argv.end(), {"--methods", a.methods});
    if (!a.fault_size.empty())
        argv.insert(argv.end(), {"--fault-size", a.fault_size});
    if (!a.out.empty())
        argv.insert(argv.end(), {"--out", a.out});
    if (a.fault_precopy)
        argv.emplace_back("--fault-precopy");
    std::vector<char*> cargv;
    for (auto& s : argv)
        cargv.push_back(s.data());
    cargv.push_back(nullptr);
    // Debian's interpreter, which sees Debian's matplotlib, before any other
    // python3 on PATH. Named by its path in argv[0] too: CPython finds its
    // prefix from argv[0], and a bare "python3" resolves along PATH, to a
    // pyenv or venv interpreter's prefix where one comes first.
    if (::access(debian_python, X_OK) == 0) {
        std::string debian_argv0 = debian_python;
        cargv[0] = debian_argv0.data();
        ::execv(debian_python, cargv.data());
        cargv[0] = argv[0].data();
    }
    ::execvp("python3", cargv.data());
    std::fprintf(stderr, "migrator bench: cannot run python3: %s\n", std::strerror(errno));
    return 2;
}

} // namespace ferry::migrator
