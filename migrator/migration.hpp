// One migration from this host, as the migrator drives it: a class whose
// steps are defined by phase, one file each:
//   migrate.cpp     checks, connections, the record, run() for each mode
//   ship.cpp        the lazy dump, registration with the source daemon, images
//   resume.cpp      the destination's restore, the commit, post-copy, the end
//   abort.cpp       a failure before the commit: the source runs again
//   heartbeat.cpp   telling the source daemon this migrator is alive
//   park_mode.cpp   the pool as destination (checkpoint) or source (restore)
// Internal to the migrator; migrate.hpp is its interface.
#pragma once

#include "core/unique_fd.hpp"
#include "criu/criu_deadlines.hpp"
#include "criu/dump_driver.hpp"
#include "early_mounts.hpp"
#include "engine.hpp"
#include "migrate.hpp"
#include "migration_record.hpp"
#include "netlink/conf_file.hpp"
#include "netlink/held_packets.hpp"
#include "park.hpp"
#include "sys/idle_poll.hpp"
#include "sys/vma_flag_watch.hpp"
#include "wire/control.hpp"

#include <spdlog/logger.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ferry::migrator {

inline constexpr auto connect_timeout = std::chrono::seconds(5);
inline constexpr auto control_timeout = std::chrono::seconds(30);
// The source daemon's answer to a cancelled pool push: it waits for the
// push's current batch (or a rebuild under way) and drops what was stored.
inline constexpr auto handoff_cancel_limit = std::chrono::seconds(120);
// Beyond the destination's own restore deadline: the images' trip and
// lazy-pages' start, before the destination reports either way.
inline constexpr auto restore_margin = std::chrono::seconds(60);
// How long an abort waits for CRIU's page server, through which CRIU resumes
// the tasks itself, before it kills CRIU instead.
inline constexpr auto abort_page_server_grace = std::chrono::seconds(5);
// How often an abort's wait on the local daemon answers CRIU meanwhile.
inline constexpr auto abort_poll = std::chrono::milliseconds(20);
// A podman checkpoint reaches its runc (where it holds for the destination's
// warm start) in a few hundred ms; the destination's podman creates the
// container and starts its restore in about a second.
inline constexpr auto hold_limit = std::chrono::seconds(60);
inline constexpr auto warm_start_limit = std::chrono::seconds(90);
// A refused hold: podman's checkpoint fails and ends at once.
inline constexpr auto hold_refuse_limit = std::chrono::seconds(30);
// A destination host that stops answering (its kernel, not only its daemon:
// one that died closed the connection) fails the migration after this much
// silence, times --deadline-scale, instead of the restore's whole deadline
// with the source frozen throughout.
inline constexpr auto destination_host_silence = std::chrono::seconds(15);
// The destination reports progress every 200 ms; this much silence means it is gone.
inline constexpr auto transfer_silence_limit = std::chrono::seconds(60);

// Throws "interrupted" once SIGINT/SIGTERM arrived.
void check_interrupt();
// Exists, is not a zombie, and is not stopped by a tracer (CRIU's freeze).
[[nodiscard]] bool process_running(pid_t pid);
[[nodiscard]] bool process_gone(pid_t pid);

// Image files as they travel: names and contents.
struct image_list {
    std::vector<std::string> names;
    std::vector<std::vector<uint8_t>> contents;
};

// Bytes [offset, +len) of file `name`'s `data`, checksummed; points into both.
FerryControl__ImageFile file_piece(const std::string& name, const std::vector<uint8_t>& data,
                                   size_t offset, size_t len);
// What a frame's repeated field holds: pointers to the pieces.
std::vector<FerryControl__ImageFile*> piece_pointers(std::vector<FerryControl__ImageFile>& pieces);

class migration {
  public:
    explicit migration(const migrate_options& opt);
    ~migration() { records::remove(_r.id); }

    migration_result run();
    // What run() had when something escaped it (its own failure path
    // threw): said as the error, with whether the source runs.
    migration_result escaped(const std::string& what) noexcept;

  private:
    void check_source();
    void decide_network();
    void connect_destination(const std::string& source_addr);
    void connect_local_daemon();
    void start_dump();
    void warm_destination();
    void start_destination_warm(const std::vector<criu::engine_file>& files);
    void send_mounts_early();
    void stop_mounts_early() noexcept;
    void watch_vma_flags();
    void settle_vma_flags();
    void register_with_source();
    image_list collect_images();
    void send_images(const image_list& images);
    void wait_registered();
    void park();
    void load_parked();
    void grant_parked_pages();
    void share_parked();
    void run_unpark();
    void reserve_park_name();
    void commit_source();
    bool receive_handoff(net::deadline until);
    void wait_resumed();
    void handle_resume_request();
    void wait_transfer();
    void request_handoff();
    void cancel_handoff();
    void handle_handoff(net::deadline until);
    void finish_source();
    void abort_source(const std::string& reason);
    bool abort_gracefully(const std::string& reason);
    void release_source(bool end_workload);
    void tell_daemon_aborted(const std::string& reason);
    void set_phase(const char* phase);
    // Heartbeats to the source daemon, which ends the migration after a
    // long silence before the commit (heartbeat.cpp). From the main
    // thread's waits only: a migrator stuck elsewhere falls silent.
    void beat(const char* step) noexcept;
    void note_daemon_verdict() noexcept;
    [[nodiscard]] bool daemon_gave_up() noexcept;
    void check_source_daemon();
    // A silence bound times --deadline-scale (never shorter): the
    // destination host's and its restore's stay in the same order.
    [[nodiscard]] std::chrono::milliseconds scaled_silence(std::chrono::seconds silence) const;
    void cleanup();
    void take_idle_poll();
    void release_idle_poll() noexcept;
    // A workload whose network moves (moving_network.cpp).
    void read_moving_links();
    void hold_packets();
    void hand_over_packets(bool last);
    void silence_source_links() noexcept;
    void unsilence_source_links() noexcept;
    void remove_source_links() noexcept;

    migrate_options _opt;
    std::shared_ptr<spdlog::logger> _log;
    migration_result _r;
    std::unique_ptr<net::stream> _dest; // TLS to the destination daemon
    std::unique_ptr<net::stream> _src;  // TLS to this host's daemon
    std::unique_ptr<criu::dump_driver> _dump;
    // Watches the tree from before CRIU reads its VMA flags to the freeze.
    std::unique_ptr<proc::vma_flag_watch> _vma_watch;
    // Container migrations: the container as its engine describes it.
    std::unique_ptr<engines::source_container> _source;
    const engines::container_info* _container = nullptr; // _source's
    std::vector<uint8_t> _container_config;              // sent with the prepare
    uint16_t _criu_port = 0;
    std::filesystem::path _dir;
    bool _dump_started = false;
    bool _destination_starts_warm = false;   // it takes incoming_warm (prepare_ok)
    bool _destination_warm = false;          // its engine's restore waits (warm_ready)
    bool _destination_builds_mounts = false; // it takes incoming_mounts (prepare_ok)
    // It sends restore_progress while it restores (prepare_ok): its
    // silence is bounded too, not only its host's.
    bool _destination_reports_progress = false;
    bool _mounts_early_asked = false; // the dump's CRIU has mnt-early
    // Sends the mount namespace CRIU dumps before the freeze (early_mounts.hpp).
    std::unique_ptr<early_mounts_sender> _mounts_early;
    // This host's idle CPUs poll from before the freeze to the resume.
    std::unique_ptr<idle_poll::hold> _idle_poll;
    bool _registered = false;
    bool _destination_never_ran = false; // its restore failed before the tasks ran
    bool _handoff_pending = false;       // the source daemon owes an outgoing_handed_off
    parked_record _parked;               // unpark: the record being restored
    bool _record_stored = false;         // park: the record is in the pool
    criu::deadlines _deadlines;          // grown with the workload in check_source
    std::vector<std::string> _criu_env;  // for every CRIU of this migration
    bool _cgroup_was_frozen = false;
    records::migration_record _rec; // what `migrator status` shows of this migration
    bool _daemon_told_abort = false;
    // The source daemon watches this migrator's silence (outgoing_prepared).
    bool _source_watches = false;
    // Its answer to a frame is on its way: whatever it sends is that answer.
    bool _src_answer_due = false;
    std::chrono::steady_clock::time_point _last_beat{};
    // What the source daemon said when it gave up on this migrator (it
    // aborted the migration or released the source itself).
    std::string _daemon_verdict;
    bool _committing = false;                     // the commit was sent (or is about to be)
    std::unique_ptr<netlink::held_packets> _held; // from before the freeze to the resume
    // Each moving link's arp_ignore, held at arp_ignore_all from the commit.
    // Opened inside the workload's namespace before the freeze and kept
    // until the source is ended: the silence is then one write each, with no
    // trip into the namespace (a thread, setns and a socket) and no RTNL
    // lock, which the copy's MAC change holds through an RCU grace period at
    // that moment (a wait when both hosts share a kernel, as on the testbed:
    // 4-18 ms).
    std::vector<netlink::conf_override> _source_arp_silence;
    // A process tree's network namespace, whose links move: held from the
    // check to the end, when the links left behind are removed.
    unique_fd _source_netns;
    uint64_t _source_netns_inode = 0; // CRIU's external net[INODE]
};

} // namespace ferry::migrator
