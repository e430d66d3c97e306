#include "criu/criu_features.hpp"

#include "sys/subprocess.hpp"

#include <chrono>
#include <map>
#include <mutex>
#include <utility>

namespace ferry::criu {

bool supports_option(const std::string& criu, const std::string& name) {
    static std::mutex lock;
    static std::map<std::pair<std::string, std::string>, bool> known;
    const std::scoped_lock hold(lock);
    const auto key = std::make_pair(criu, name);
    if (auto it = known.find(key); it != known.end())
        return it->second;
    bool supported = false;
    try {
        (void)run_capture({criu, "--" + name, "--version"}, std::chrono::seconds(2));
        supported = true;
    } catch (const std::exception&) {
        // a usage error, a missing binary, a hang: all mean "not here"
    }
    known.emplace(key, supported);
    return supported;
}

lazy_dump_features lazy_dump_features::probe(const std::string& criu) {
    lazy_dump_features f;
    f.pagemap_only = supports_option(criu, "lazy-pagemap-only");
    f.whole_vmas = f.pagemap_only && supports_option(criu, "lazy-whole-vmas");
    f.smaps_before_freeze = supports_option(criu, "smaps-before-freeze");
    return f;
}

std::string lazy_dump_features::config_lines() const {
    std::string lines;
    if (pagemap_only)
        lines += "lazy-pagemap-only\n";
    if (whole_vmas)
        lines += "lazy-whole-vmas\n";
    if (smaps_before_freeze)
        lines += "smaps-before-freeze\n";
    return lines;
}

} // namespace ferry::criu
