#include "engine_request.hpp"

#include "core/error.hpp"
#include "sys/proc.hpp"
#include "sys/subprocess.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ferry::engines {

namespace {

using json = nlohmann::json;

void write_json(const std::filesystem::path& file, const json& j) {
    std::filesystem::create_directories(file.parent_path());
    const auto tmp = file.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << j.dump(2) << "\n";
        if (!out)
            throw error(fmt::format("cannot write {}", tmp));
    }
    std::filesystem::rename(tmp, file); // the shim never sees half a request
}

std::optional<json> read_json(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in)
        return std::nullopt;
    try {
        return json::parse(in);
    } catch (const std::exception& e) {
        throw error(fmt::format("{} is malformed: {}", file.string(), e.what()));
    }
}

// A number in range of T: nlohmann's get<T> converts a float or an
// out-of-range integer without a word (and a float out of range is
// undefined behaviour; the fuzzer found it).
template <typename T>
bool integer_fits(const json& v) {
    if (v.is_number_unsigned())
        return v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max());
    if (v.is_number_integer())
        return v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
               (v.get<int64_t>() < 0 ||
                uint64_t(v.get<int64_t>()) <= uint64_t(std::numeric_limits<T>::max()));
    return false;
}

template <typename T>
T field(const json& j, const char* key, const std::filesystem::path& file) {
    try {
        const json& v = j.at(key);
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            if (!integer_fits<T>(v))
                throw error("not an integer in range");
        }
        return v.get<T>();
    } catch (const std::exception&) {
        throw error(fmt::format("{} lacks a valid '{}'", file.string(), key));
    }
}

std::vector<std::string> criu_env_field(const json& j, const std::filesystem::path& file) {
    std::vector<std::string> env;
    if (j.contains("criu_env"))
        env = field<std::vector<std::string>>(j, "criu_env", file);
    for (const auto& e : env)
        if (!criu_env_allowed(e))
            throw error(fmt::format("{} asks for CRIU environment '{}', which is not allowed",
                                    file.string(), e));
    return env;
}

} // namespace

bool criu_env_allowed(const std::string& entry) noexcept {
    // 130: CRIU's fallback where breakpoints do not trap. 6 (FI_POST_RESTORE):
    // Ferry's fault injection in tests; it can only fail a restore. A log
    // level for Ferry's CRIU plugin to set (criu-plugin/).
    const std::string_view level = criu_log_level_variable;
    return entry == "CRIU_FAULT=130" || entry == "CRIU_FAULT=6" ||
           (entry.size() == level.size() + 2 && entry.starts_with(level) &&
            entry[level.size()] == '=' && entry.back() >= '0' && entry.back() <= '4');
}

std::string criu_log_level_env(int level) {
    if (level < 0 || level > 4)
        throw error(fmt::format("CRIU has no log level {}", level));
    return fmt::format("{}={}", criu_log_level_variable, level);
}

void write_request(const std::filesystem::path& file, const checkpoint_request& r) {
    write_json(file, {{"migration_id", r.migration_id},
                      {"migrator_pid", r.migrator_pid},
                      {"page_server_port", r.page_server_port},
                      {"status_fifo", r.status_fifo},
                      {"criu_config", r.criu_config},
                      {"images_dir", r.images_dir},
                      {"criu_env", r.criu_env},
                      {"hold_socket", r.hold_socket},
                      {"tcp_established", r.tcp_established}});
}

void write_request(const std::filesystem::path& file, const restore_request& r) {
    write_json(file, {{"migration_id", r.migration_id},
                      {"lazy_socket", r.lazy_socket},
                      {"gate_socket", r.gate_socket},
                      {"criu_config", r.criu_config},
                      {"devshm_tar", r.devshm_tar},
                      {"criu_env", r.criu_env},
                      {"wait_for_images", r.wait_for_images},
                      {"images_dir", r.images_dir},
                      {"criu_waits", r.criu_waits},
                      {"tcp_established", r.tcp_established}});
}

bool is_container_id(const std::string& s) noexcept {
    return !s.empty() && s.size() <= 128 &&
           s.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
}

std::filesystem::path checkpoint_request_path(const std::string& container_id) {
    if (!is_container_id(container_id))
        throw error(fmt::format("'{}' is not a container id", container_id));
    return std::filesystem::path("/run/ferry/engine-requests") /
           (container_id + ".checkpoint.json");
}

std::optional<checkpoint_request> read_checkpoint_request(const std::filesystem::path& file) {
    auto j = read_json(file);
    if (!j)
        return std::nullopt;
    checkpoint_request r;
    r.migration_id = field<std::string>(*j, "migration_id", file);
    r.migrator_pid = field<pid_t>(*j, "migrator_pid", file);
    r.page_server_port = field<uint16_t>(*j, "page_server_port", file);
    r.status_fifo = field<std::string>(*j, "status_fifo", file);
    r.criu_config = field<std::string>(*j, "criu_config", file);
    r.images_dir = j->value("images_dir", "");
    r.criu_env = criu_env_field(*j, file);
    r.hold_socket = j->value("hold_socket", "");
    r.tcp_established = j->value("tcp_established", false);
    if (r.migrator_pid <= 0 || r.page_server_port == 0 || r.status_fifo.empty())
        throw error(fmt::format("{} holds an invalid request", file.string()));
    return r;
}

std::optional<restore_request> read_restore_request(const std::filesystem::path& file) {
    auto j = read_json(file);
    if (!j)
        return std::nullopt;
    restore_request r;
    r.migration_id = field<std::string>(*j, "migration_id", file);
    r.lazy_socket = field<std::string>(*j, "lazy_socket", file);
    r.gate_socket = field<std::string>(*j, "gate_socket", file);
    r.criu_config = field<std::string>(*j, "criu_config", file);
    r.devshm_tar = j->value("devshm_tar", "");
    r.criu_env = criu_env_field(*j, file);
    r.wait_for_images = j->value("wait_for_images", false);
    r.images_dir = j->value("images_dir", "");
    r.criu_waits = j->value("criu_waits", false);
    r.tcp_established = j->value("tcp_established", false);
    if (r.lazy_socket.empty() || r.gate_socket.empty() ||
        (r.wait_for_images && r.images_dir.empty()))
        throw error(fmt::format("{} holds an invalid request", file.string()));
    return r;
}

void narrow_criu_config(const std::filesystem::path& file, const std::string& option,
                        const std::string& value) {
    std::ifstream in(file);
    if (!in)
        throw error(fmt::format("cannot read CRIU's config {}", file.string()));
    const std::string prefix = option + " ";
    std::string text;
    bool names_option = false;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(prefix, 0) == 0) {
            line = prefix + value;
            names_option = true;
        }
        text += line + "\n";
    }
    if (!names_option)
        return;
    std::ofstream out(file, std::ios::trunc);
    out << text;
    if (!out.flush())
        throw error(fmt::format("cannot write CRIU's config {}", file.string()));
}

void criu_config_gate_only(const std::filesystem::path& file) {
    narrow_criu_config(file, script_actions_option, script_actions_gate);
}

bool runc_runs_hooks_in_restore(const json& spec) {
    if (!spec.is_object())
        return true; // unreadable: let runc see the step, as without the option
    const auto hooks = spec.find("hooks");
    if (hooks == spec.end() || !hooks->is_object())
        return false;
    for (const char* kind : {"prestart", "createRuntime"}) {
        const auto list = hooks->find(kind);
        if (list != hooks->end() && list->is_array() && !list->empty())
            return true;
    }
    return false;
}

void podman_remove(const std::string& podman, const std::string& name_or_id) {
    (void)run_capture({podman, "container", "rm", "--force", "--time", "0", name_or_id},
                      std::chrono::minutes(1));
}

} // namespace ferry::engines
