// What Ferry asks of its runc shim (ferry-runc), which container engines run
// in place of runc. The engine knows nothing of Ferry; the request rides in a
// file where runc's arguments point:
//   checkpoint: <--work-path>/ferry-checkpoint.json, written by the migrator
//               -> runc checkpoint gets --lazy-pages --page-server --status-fd
//   restore:    <--image-path>/ferry-restore.json, shipped with the images
//               -> runc restore gets --lazy-pages, CRIU's lazy-pages socket
//                  is linked to Ferry's, and CRIU runs the shim as its
//                  action script, whose post-restore step asks the daemon
//                  (gate socket) whether the tasks may resume.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace ferry::engine {

inline constexpr const char* checkpoint_request_file = "ferry-checkpoint.json";
inline constexpr const char* restore_request_file = "ferry-restore.json";

struct checkpoint_request {
    std::string migration_id;
    pid_t migrator_pid = 0; // a request whose migrator is gone is stale
    uint16_t page_server_port = 0;
    std::string status_fifo;
    std::string criu_config; // CRIU_CONFIG_FILE for the dump; may be empty
};

struct restore_request {
    std::string migration_id;
    std::string lazy_socket; // where Ferry's lazy-pages listens
    std::string gate_socket; // where the daemon answers the post-restore step
    std::string criu_config;
};

void write_request(const std::filesystem::path& file, const checkpoint_request& r);
void write_request(const std::filesystem::path& file, const restore_request& r);
// Nothing when the file does not exist; throws ferry::error when it is malformed.
std::optional<checkpoint_request> read_checkpoint_request(const std::filesystem::path& file);
std::optional<restore_request> read_restore_request(const std::filesystem::path& file);

// The gate's one exchange, a line each way:
//   shim -> daemon: "post-restore <root pid>\n"
//   daemon -> shim: "resume\n" or "refuse <reason>\n"
inline constexpr const char* gate_resume = "resume";

// The podman command: $FERRY_PODMAN, else `podman` from PATH.
std::string podman_binary();
// `podman container rm --force --time 0 NAME_OR_ID`; throws ferry::error.
void podman_remove(const std::string& name_or_id);

// The directory holding Ferry's CRIU plugin (ferry_criu.so), for CRIU's
// `libdir`: $FERRY_CRIU_PLUGIN_DIR, the build tree beside this binary, or the
// installed lib/ferry/criu. Nothing if it is not there (CRIU runs without it).
std::optional<std::filesystem::path> criu_plugin_dir();

// Writes a CRIU config file that loads Ferry's plugin (if found), plus `extra`
// lines; returns its path.
std::filesystem::path write_criu_config(const std::filesystem::path& file,
                                        const std::string& extra = "");

} // namespace ferry::engine
