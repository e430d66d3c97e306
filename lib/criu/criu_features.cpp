#include "criu/criu_features.hpp"

#include "sys/subprocess.hpp"

#include <chrono>
#include <map>
#include <mutex>

namespace ferry::criu {

bool supports_lazy_pagemap_only(const std::string& criu) {
    static std::mutex lock;
    static std::map<std::string, bool> known;
    const std::scoped_lock hold(lock);
    if (auto it = known.find(criu); it != known.end())
        return it->second;
    // CRIU parses options in order: a known one is taken and --version then
    // exits 0; an unknown one is a usage error.
    bool supported = false;
    try {
        (void)run_capture({criu, "--lazy-pagemap-only", "--version"}, std::chrono::seconds(2));
        supported = true;
    } catch (const std::exception&) {
        // a usage error, a missing binary, a hang: all mean "not here"
    }
    known.emplace(criu, supported);
    return supported;
}

} // namespace ferry::criu
