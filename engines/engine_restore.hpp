// Restoring a container through its engine, post-copy.
//
// The migrator sends CRIU's images plus the engine's files ("engine.*": the
// container's configuration, its writable layer's diff, its /dev/shm). The
// engine's part (podman/podman_restore.cpp, docker/docker_restore.cpp) turns them into
// what that engine restores from, with Ferry's restore request among the
// CRIU images, and names the engine command that restores. The engine runs
// Ferry's runc shim, which makes runc's restore lazy and, as CRIU's action
// script, asks the daemon's gate socket at post-restore whether the tasks
// may resume.
#pragma once

#include "core/error.hpp"
#include "core/unique_fd.hpp"
#include "criu/dump_driver.hpp"
#include "netlink/link_identity.hpp"
#include "sys/host_tools.hpp"

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ferry::engines {

inline constexpr const char* engine_file_prefix = "engine.";

class engine_restore {
  public:
    virtual ~engine_restore() = default;
    // Before the freeze: throws if this host cannot take the container
    // (the name is taken, the image or Ferry's shim is missing), and does
    // what needs no frozen state: docker creates the container from its
    // configuration (`config`, as the migrator sent it; may be empty). What
    // it creates (here or in warm_command) is recorded in `dir`
    // (reservation_file) until the container runs, so a daemon that dies
    // meanwhile removes it when it starts again: `dir` is on disk, apart
    // from the session's images, which are on tmpfs.
    virtual void reserve(const std::filesystem::path& dir, const std::string& image,
                         const std::vector<uint8_t>& config) = 0;
    // Before reserve(), for a container whose network moves with it: its
    // CRIU restores the TCP connections, and the copy gets the same
    // addresses on the same links (keep_addresses; its MACs differ until the
    // daemon hands them over at the resume). Throws if this engine cannot.
    void keep_network(const std::vector<netlink::link_identity>& links) {
        keep_addresses(links);
        _connections_move = true;
        _links_move = !links.empty();
    }
    // Before the freeze, once the source's engine has written the
    // container's configuration (`files`, named as the engine names them):
    // what starts the engine's restore now, so that only runc and CRIU are
    // left for the downtime (a warm restore). The caller runs it; its runc
    // shim then waits at the gate for the images (gate_request::images).
    // Empty: this engine restores only once the images are in.
    virtual std::vector<std::string> warm_command(const std::filesystem::path& /*dir*/,
                                                  const std::string& /*migration_id*/,
                                                  const std::vector<std::string>& /*criu_env*/,
                                                  const std::vector<criu::engine_file>& /*files*/) {
        return {};
    }
    // The warm restore's shim waits for the images, with runc's `bundle`
    // (the engine itself is busy: its restore holds the container's lock).
    virtual void warm_waiting(const std::filesystem::path& /*bundle*/) {}
    // Once the images are in `dir`: builds what the engine restores from;
    // returns the command that restores (it ends once the tasks run), or
    // nothing for a warm restore, whose command runs already.
    // `criu_env`: environment entries for the CRIU under runc (the shim
    // exports them; engines::criu_env_allowed).
    virtual std::vector<std::string> prepare(const std::filesystem::path& dir,
                                             const std::string& migration_id,
                                             const std::vector<std::string>& criu_env) = 0;
    // After a failed restore: removes what reserve(), prepare() or the
    // engine created, and then its record. Once is enough; later calls do
    // nothing.
    virtual void remove() noexcept = 0;
    // The container runs: it is the engine's now, and its record goes.
    virtual void release() noexcept {}
    // The container's init on the host, from the engine; 0 if unknown.
    virtual pid_t container_pid() = 0;

  protected:
    // An engine whose copy cannot start with links of its own names
    // (engines/README.md) refuses here.
    virtual void keep_addresses(const std::vector<netlink::link_identity>& links) {
        if (!links.empty())
            throw error("this engine cannot give a container its addresses back on another host "
                        "yet: migrate it with --tcp-close");
    }
    // engine_restore_detail::write_restore_request, with tcp_established
    // once keep_network() was called.
    std::filesystem::path write_restore_request(const std::filesystem::path& dir,
                                                const std::filesystem::path& images,
                                                const std::string& migration_id,
                                                const std::string& devshm_tar,
                                                const std::vector<std::string>& criu_env,
                                                const host_tools& tools, bool warm = false) const;

  private:
    bool _connections_move = false;
    bool _links_move = false; // addresses too, not only loopback's connections
};

inline constexpr const char* reservation_file = "engine-reservation.json";

// At the daemon's start: removes the containers that sessions below
// `incoming_root` created before the freeze and that never ran (the daemon
// died in between). Errors are logged.
void remove_stale_reservations(const std::filesystem::path& incoming_root,
                               const host_tools& tools) noexcept;

// Throws for an unknown engine or a name that is not a container name.
std::unique_ptr<engine_restore> make_engine_restore(const std::string& engine,
                                                    const std::string& container_name,
                                                    const host_tools& tools);

// What the engines' restores share.
namespace engine_restore_detail {

// Writes Ferry's restore request (engine_request.hpp) into `images`: the
// lazy-pages socket and gate of the session in `dir`, and a CRIU config with
// the shim (tools.runc_shim) as action script. `devshm_tar` may be empty.
// A warm restore's request (`warm`) makes the shim wait for the images and
// take them from `dir`. `links_move`: the copy takes the source's
// addresses, possibly at setup-namespaces (engine_request.hpp).
std::filesystem::path
write_restore_request(const std::filesystem::path& dir, const std::filesystem::path& images,
                      const std::string& migration_id, const std::string& devshm_tar,
                      const std::vector<std::string>& criu_env, const host_tools& tools,
                      bool warm = false, bool tcp_established = false, bool links_move = false);
// The session's engine file `name` ("engine.<name>"); throws if it is missing.
std::filesystem::path engine_file(const std::filesystem::path& dir, const std::string& name);
// The container paths the source deleted from its writable layer (the
// session's deleted.files); throws if it is missing or malformed.
std::vector<std::string> deleted_files(const std::filesystem::path& dir);
// Where the session's copy of the container's /dev/shm tar is (it may not
// exist: the source may have had none).
std::filesystem::path devshm_tar(const std::filesystem::path& dir);
// The CRIU images among `dir`'s files (not engine files, logs, configs).
bool is_criu_image(const std::filesystem::path& file);
// The container's root as its engine mounted it for runc: `bundle`'s
// config.json names it. Throws if it is not a directory.
std::filesystem::path mounted_root(const std::filesystem::path& bundle);
// The source's writable-layer changes (the session's rootfs-diff.tar and
// deleted.files in `dir`) onto the container's mounted `root`: deletions
// never leave it, even through the container's own symlinks.
void apply_rootfs_diff_to_root(const std::filesystem::path& dir, const std::filesystem::path& root);
// The file `name` among what the source sent for a warm start; throws if
// it sent none.
const criu::engine_file& sent_file(const std::vector<criu::engine_file>& files,
                                   const std::string& name);
// A warm restore's runc reads descriptors.json before its CRIU starts, so
// before the images (which bring the same) arrive: the source's, into `dir`.
void write_runc_descriptors(const std::filesystem::path& dir,
                            const std::vector<criu::engine_file>& files);

} // namespace engine_restore_detail

// The gate: a unix socket in `dir` the shim connects to at post-restore.
unique_fd listen_gate(const std::filesystem::path& dir);
std::filesystem::path gate_path(const std::filesystem::path& dir);
// The shim's line: "images <bundle>" (a warm restore waits for them),
// "setup-namespaces <pid>" (a network that moves) or "post-restore <pid>".
struct gate_request {
    bool images = false;
    std::string bundle; // images: runc's bundle (its config.json names the root)
    bool setup_namespaces = false;
    pid_t pid = 0; // post-restore or setup-namespaces: the restored root task
};
gate_request read_gate_request(int conn);
void answer_gate(int conn, bool resume, const std::string& reason);
// To "images": "go" once they are in, or a refusal.
void answer_images(int conn, bool go, const std::string& reason);

} // namespace ferry::engines
