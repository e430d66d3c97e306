#include "cgroup_freeze.hpp"

#include <nlohmann/json.hpp>
#include <time.h>

#include <fstream>
#include <thread>

namespace ferry::shim {

namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool write_all(const fs::path& p, const std::string& s) {
    std::ofstream out(p);
    out << s;
    out.flush();
    return bool(out);
}

} // namespace

std::optional<cgroup_freezer> cgroup_freezer::of_container(const fs::path& runc_root,
                                                           const std::string& id) {
    std::ifstream in(runc_root / id / "state.json");
    if (!in)
        return std::nullopt;
    try {
        const auto state = nlohmann::json::parse(in);
        const auto& paths = state.at("cgroup_paths");
        if (paths.contains("freezer")) {
            const fs::path dir = paths.at("freezer").get<std::string>();
            if (fs::exists(dir / "freezer.state"))
                return cgroup_freezer(dir, false);
        }
        if (paths.contains("")) { // cgroup v2: the unified hierarchy
            const fs::path dir = paths.at("").get<std::string>();
            if (fs::exists(dir / "cgroup.freeze"))
                return cgroup_freezer(dir, true);
        }
    } catch (const std::exception&) {
    }
    return std::nullopt;
}

bool cgroup_freezer::frozen() const {
    if (_v2)
        return read_all(_dir / "cgroup.events").find("frozen 1") != std::string::npos;
    return read_all(_dir / "freezer.state").rfind("FROZEN", 0) == 0;
}

bool cgroup_freezer::freeze(std::chrono::milliseconds timeout) {
    if (!(_v2 ? write_all(_dir / "cgroup.freeze", "1")
              : write_all(_dir / "freezer.state", "FROZEN")))
        return false;
    const auto until = std::chrono::steady_clock::now() + timeout;
    // Tasks in interruptible sleeps freeze within microseconds; poll finely.
    for (auto step = std::chrono::microseconds(50);;
         step = std::min(step * 2, decltype(step)(2000))) {
        if (frozen())
            return true;
        if (std::chrono::steady_clock::now() > until) {
            thaw();
            return false;
        }
        std::this_thread::sleep_for(step);
    }
}

void cgroup_freezer::thaw() const {
    (void)(_v2 ? write_all(_dir / "cgroup.freeze", "0")
               : write_all(_dir / "freezer.state", "THAWED"));
}

} // namespace ferry::shim
