// What Ferry asks of its runc shim (ferry-runc), which container engines run
// in place of runc. The engine knows nothing of Ferry (podman and containerd
// both drop their callers' environment), so the request rides in a file:
//   checkpoint: <request_dir>/<container id>.checkpoint.json, written by the
//               migrator -> runc checkpoint gets --lazy-pages --page-server
//               --status-fd (and its images land where Ferry says); a runc
//               pause of that container (docker's checkpoint pauses first)
//               is reported as the moment the container stopped
//   restore:    <--image-path>/ferry-restore.json, shipped with the images
//               -> runc restore gets --lazy-pages, CRIU's lazy-pages socket
//                  is linked to Ferry's, and CRIU's post-restore step asks
//                  the daemon (gate socket) whether the tasks may resume:
//                  CRIU itself (its action socket, criu-patches/0017), or
//                  ferry-criu-action, its action script.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ferry::engines {

inline constexpr const char* restore_request_file = "ferry-restore.json";

// Podman's and docker's container ids: hex. Engines also call runc with other
// last arguments ("checkpoint --help" probes).
[[nodiscard]] bool is_container_id(const std::string& s) noexcept;

// Where checkpoint requests wait for the shim: one file per container id
// (ids are unique across engines and hosts sharing this directory); throws
// unless `container_id` is one.
std::filesystem::path checkpoint_request_path(const std::string& container_id);

struct checkpoint_request {
    std::string migration_id;
    pid_t migrator_pid = 0; // a request whose migrator is gone is stale
    uint16_t page_server_port = 0;
    std::string status_fifo;
    std::string criu_config; // CRIU_CONFIG_FILE for the dump; may be empty
    // Where CRIU writes the images instead of the engine's --image-path
    // (empty: where the engine says). Docker's checkpoint dir only exists
    // once runc has ended, which a lazy dump does at the migration's end.
    std::string images_dir;
    // Environment entries for CRIU (only criu_env_allowed names pass).
    std::vector<std::string> criu_env;
    // A unix socket of the migrator's (empty: none). The shim holds there
    // before runc starts, so before the freeze, until the migrator says
    // "go": by then podman has written the container's configuration, and
    // the destination starts its restore from it (a warm restore).
    std::string hold_socket;
    // The container's TCP connections move: runc checkpoints with
    // --tcp-established (docker never passes it, and runc's RPC then says
    // false, which wins over the CRIU config).
    bool tcp_established = false;
};

struct restore_request {
    std::string migration_id;
    std::string lazy_socket; // where Ferry's lazy-pages listens
    std::string gate_socket; // where the daemon answers the post-restore step
    std::string criu_config;
    // A tar of the container's /dev/shm, unpacked into the mount's source
    // before runc restores (empty: none). Docker mounts that tmpfs only as
    // the container starts.
    std::string devshm_tar;
    std::vector<std::string> criu_env; // as in checkpoint_request
    // A warm restore: the engine started before the freeze, so the shim
    // first asks the gate for the images ("images" -> "go"), then points
    // runc's --image-path at images_dir, where they arrived.
    bool wait_for_images = false;
    std::string images_dir;
    // With wait_for_images: the real CRIU can start at once and wait for the
    // images itself (--restore-wait-fd, criu-patches/0015), so its exec,
    // libraries and set-up happen before the freeze, not after the images.
    bool criu_waits = false;
    // The container's TCP connections move with it: runc restores with
    // --tcp-established (its RPC says false otherwise, which wins over the
    // CRIU config; podman refuses the flag on a restore with --name).
    bool tcp_established = false;
};

// The environment a request may set for CRIU: "CRIU_FAULT=130" (no hardware
// breakpoints, lib/hw_breakpoints.hpp), "CRIU_FAULT=6" (a test's restore
// failing before post-restore, FERRY_FAULT=criu-fail-before-post-restore),
// FERRY_CRIU_LOG_LEVEL=0..4 and nothing else.
[[nodiscard]] bool criu_env_allowed(const std::string& entry) noexcept;

// runc hands its CRIU log level 4 by RPC, which outranks CRIU_CONFIG_FILE;
// Ferry's CRIU plugin sets the level this names instead (criu-plugin/).
inline constexpr const char* criu_log_level_variable = "FERRY_CRIU_LOG_LEVEL";
// "FERRY_CRIU_LOG_LEVEL=N"; throws for a level CRIU lacks.
[[nodiscard]] std::string criu_log_level_env(int level);

void write_request(const std::filesystem::path& file, const checkpoint_request& r);
void write_request(const std::filesystem::path& file, const restore_request& r);
// Nothing when the file does not exist; throws ferry::error when it is malformed.
std::optional<checkpoint_request> read_checkpoint_request(const std::filesystem::path& file);
std::optional<restore_request> read_restore_request(const std::filesystem::path& file);

// The gate's exchanges, a line each way:
//   CRIU -> daemon: "post-restore <root pid>\n"
//   daemon -> CRIU: "ok\n" or "refuse <reason>\n"
// (CRIU's action-socket protocol, criu-patches/0017: "ok" lets the step go
// on; ferry-criu-action speaks it too),
// and, for a warm restore, before runc starts:
//   shim -> daemon: "images <runc's bundle dir>\n"
//   daemon -> shim: "go\n" once they are in, or "refuse <reason>\n"
// where, when CRIU waits for the images (criu_waits) and can build the
// mount tree before them (criu-patches/0030), the daemon may first send
//   daemon -> shim: "mounts\n": the early mount images are in
// (the shim tells the waiting CRIU, which builds the tree), then "go".
// The hold before a checkpoint (checkpoint_request::hold_socket):
//   shim -> migrator: "hold <runc's descriptors.json, one line>\n"
//   migrator -> shim: "go\n" or "refuse <reason>\n"
inline constexpr const char* gate_ok = "ok";
inline constexpr const char* gate_images = "images";
// "setup-namespaces <pid>": CRIU made the copy's namespaces (and runc's
// hooks configured its network); answered "ok" once the daemon gave the
// copy the source's addresses (a network that moves), before any socket.
inline constexpr const char* gate_setup_namespaces = "setup-namespaces";
inline constexpr const char* hold_request = "hold";
inline constexpr const char* go_answer = "go";
inline constexpr const char* mounts_early_note = "mounts";

// The steps of a restore CRIU runs Ferry's action script at, where it can
// (criu-patches/0013, `action-script-actions` in the restore's CRIU config):
// post-restore, the commit gate, always; setup-namespaces too when the
// container's addresses move (not only loopback's connections), unless the shim finds that the
// copy's network namespace is not made inside the restore (the bundle names it: podman's, and
// docker's once its hook ran ahead), since then the daemon has nothing to do there and the step
// would only cost a fork and an exec
// (~2 ms here) in the downtime.
inline constexpr const char* script_actions_gate = "post-restore";
inline constexpr const char* script_actions_gate_and_network = "post-restore,setup-namespaces";
inline constexpr const char* script_actions_option = "action-script-actions";
// criu-patches/0017: CRIU asks the gate at those steps itself, through its
// action socket, instead of a fork and an exec of ferry-criu-action (~2 ms
// each here).
inline constexpr const char* action_socket_option = "action-socket";

// The RPC notifications runc acts on in a restore (criu-patches/0017's
// `rpc-notify-actions`): post-restore (it records the restored process),
// and setup-namespaces only to run the bundle's prestart and createRuntime
// hooks. The other five (pre-restore, post-setup-namespaces,
// network-unlock, pre-resume, post-resume) are round trips to runc that do
// nothing for a runc-run container (0.2-1.5 ms each here): its
// network-lock and -unlock act only on libcontainer's own network
// settings, which runc's command line never sets.
inline constexpr const char* rpc_notify_option = "rpc-notify-actions";
inline constexpr const char* rpc_notify_runc = "post-restore,setup-namespaces";
inline constexpr const char* rpc_notify_runc_without_hooks = "post-restore";
// criu-patches/0025: runc hears of post-restore once the root task is forked
// (after setup-namespaces where the bundle has hooks), and CRIU reads its
// answer at post-restore. runc's handler needs only the root's pid: it
// records the process and its start time, the same from the fork on.
inline constexpr const char* rpc_post_restore_early_option = "rpc-post-restore-early";

// Sets `option`'s value in the CRIU config at `file` where the config names
// the option at all (written only where the CRIU has it). Throws
// ferry::error if the file cannot be read or written.
void narrow_criu_config(const std::filesystem::path& file, const std::string& option,
                        const std::string& value);
// Narrows the config's gated steps to script_actions_gate.
void criu_config_gate_only(const std::filesystem::path& file);
// Whether runc runs hooks of the bundle's spec (config.json) at CRIU's
// setup-namespaces: prestart or createRuntime ones. A spec that is not an
// object (unreadable) says yes: runc then keeps the step.
[[nodiscard]] bool runc_runs_hooks_in_restore(const nlohmann::json& spec);

// `podman container rm --force --time 0 NAME_OR_ID`; throws ferry::error.
void podman_remove(const std::string& podman, const std::string& name_or_id);

} // namespace ferry::engines
