#include "migration_record.hpp"

#include "core/error.hpp"
#include "sys/proc.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>

namespace ferry::records {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Every field, by its own name; a missing one keeps its default.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(migration_record, id, mode, migrator_pid,
                                                migrator_start, source_pid, container, engine,
                                                destination, phase, started_unix_ms,
                                                phase_since_unix_ms, committed, cgroup_was_frozen,
                                                work_dir, local_daemon)

namespace {

bool is_id(const std::string& s) {
    return !s.empty() && s.size() <= 64 &&
           std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(uint8_t(c)); });
}

} // namespace

fs::path records_dir() {
    return "/run/ferry/migrations";
}

uint64_t now_unix_ms() {
    return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count());
}

// Each migration has a directory of its own, made once: a reader listing
// the records never races a rename in the directory it lists (readdir may
// miss an entry renamed meanwhile). The record inside is replaced by rename,
// so a reader opening it sees the old one or the new one.
void write(const migration_record& r, const fs::path& dir) {
    if (!is_id(r.id))
        throw error(fmt::format("'{}' is not a migration id", r.id));
    const auto own = dir / r.id;
    fs::create_directories(own);
    const auto tmp = own / fmt::format("record.json.{}.tmp", ::getpid());
    {
        std::ofstream out(tmp);
        out << json(r).dump(1) << '\n';
        if (!out)
            throw error("cannot write " + tmp.string());
    }
    fs::rename(tmp, own / "record.json");
}

void remove(const std::string& id, const fs::path& dir) noexcept {
    if (!is_id(id))
        return;
    std::error_code ec;
    fs::remove_all(dir / id, ec);
}

std::vector<migration_record> list(const fs::path& dir) {
    std::vector<migration_record> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        if (!is_id(e.path().filename().string()))
            continue;
        try {
            std::ifstream in(e.path() / "record.json");
            if (in) {
                auto r = json::parse(in).get<migration_record>();
                if (r.id == e.path().filename().string()) // a record of its own directory
                    out.push_back(std::move(r));
            }
        } catch (const std::exception&) {
            // not ours: skipped
        }
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.started_unix_ms < b.started_unix_ms; });
    return out;
}

migration_record find(const std::string& id, const fs::path& dir) {
    std::vector<migration_record> hits;
    for (auto& r : list(dir))
        if (r.id.rfind(id, 0) == 0)
            hits.push_back(std::move(r));
    if (hits.empty())
        throw error(fmt::format("no migration {} is in flight on this host", id));
    if (hits.size() > 1)
        throw error(
            fmt::format("{} migrations start with {}; give more of the id", hits.size(), id));
    return hits.front();
}

bool migrator_alive(const migration_record& r) {
    if (r.migrator_pid <= 0)
        return false;
    // A killed migrator stays a zombie until its parent reaps it: it is dead
    // all the same, and will never release its workload.
    const auto state = proc::state(r.migrator_pid);
    return state && *state != 'Z' && *state != 'X' &&
           proc::start_time(r.migrator_pid) == r.migrator_start;
}

} // namespace ferry::records
