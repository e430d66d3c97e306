// Control frames: a fixed 12-byte header followed by one packed
// ferry_control.envelope (lib/proto/control.proto).
//
//   0 u32 magic "FRYC"   4 u16 version   6 u16 reserved (0)   8 u32 payload length
#pragma once

#include "sys/net.hpp"
#include "wire/control.pb-c.h"

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ferry::control {

inline constexpr uint32_t frame_magic = 0x43595246; // "FRYC"
inline constexpr uint16_t frame_version = 1;
inline constexpr size_t frame_header_size = 12;
inline constexpr uint32_t max_frame_payload = 256u << 20;

// A destination that was asked sends restore_progress this often while it
// restores; the migrator gives up after restore_progress_silence of none
// (times --deadline-scale). Longer than the connection's own silence
// bound (the migrator's destination_host_silence), so that a host that is
// gone is named as such.
inline constexpr auto restore_progress_interval = std::chrono::seconds(1);
inline constexpr auto restore_progress_silence = std::chrono::seconds(25);
// How long the migrator waits for the source daemon's answer to its commit;
// the daemon's own checks before it answers stay well inside it.
inline constexpr auto commit_answer_wait = std::chrono::seconds(30);
// A migrator that asked sends migrator_alive this often until its commit;
// the source daemon ends the migration after migrator_heartbeat_silence of
// none (times --deadline-scale), never after less than the floor. Twice the
// migrator's longest wait that cannot beat (one image frame's send, 30 s).
inline constexpr auto migrator_heartbeat_interval = std::chrono::seconds(1);
inline constexpr auto migrator_heartbeat_silence = std::chrono::seconds(60);
inline constexpr auto migrator_heartbeat_floor = std::chrono::seconds(10);

using envelope = FerryControl__Envelope;

struct envelope_deleter {
    void operator()(envelope* e) const noexcept {
        ferry_control__envelope__free_unpacked(e, nullptr);
    }
};
using envelope_ptr = std::unique_ptr<envelope, envelope_deleter>;

enum class frame_error : uint8_t { none, bad_magic, bad_version, bad_reserved, too_large };
[[nodiscard]] const char* to_string(frame_error e) noexcept;

std::vector<std::byte> encode_frame(const envelope& e);
[[nodiscard]] frame_error decode_frame_header(std::span<const std::byte, frame_header_size> header,
                                              uint32_t& payload_len) noexcept;
// nullptr when the payload is not a valid envelope or carries no body.
[[nodiscard]] envelope_ptr decode_payload(std::span<const std::byte> payload) noexcept;

void send(net::stream& s, const envelope& e, net::deadline until);
// Returns nullptr on a clean end of stream; throws ferry::error on a
// malformed frame, a timeout, or an I/O error.
envelope_ptr receive(net::stream& s, net::deadline until);
// The same over an fd someone else owns (a local socket pair, a pipe).
void send(int fd, const envelope& e, net::deadline until);
envelope_ptr receive(int fd, net::deadline until);

// Wraps one message in an envelope and sends it.
#define FERRY_CONTROL_BODIES(X)                                                                    \
    X(FerryControl__ErrorReply, ERROR, error)                                                      \
    X(FerryControl__IncomingPrepare, INCOMING_PREPARE, incoming_prepare)                           \
    X(FerryControl__PrepareOk, PREPARE_OK, prepare_ok)                                             \
    X(FerryControl__IncomingImages, INCOMING_IMAGES, incoming_images)                              \
    X(FerryControl__RestoreResult, RESTORE_RESULT, restore_result)                                 \
    X(FerryControl__TransferProgress, TRANSFER_PROGRESS, transfer_progress)                        \
    X(FerryControl__TransferStats, TRANSFER_STATS, transfer_stats)                                 \
    X(FerryControl__OutgoingRegister, OUTGOING_REGISTER, outgoing_register)                        \
    X(FerryControl__OutgoingRegistered, OUTGOING_REGISTERED, outgoing_registered)                  \
    X(FerryControl__OutgoingCommit, OUTGOING_COMMIT, outgoing_commit)                              \
    X(FerryControl__OutgoingFinish, OUTGOING_FINISH, outgoing_finish)                              \
    X(FerryControl__OutgoingFinished, OUTGOING_FINISHED, outgoing_finished)                        \
    X(FerryControl__OutgoingAbort, OUTGOING_ABORT, outgoing_abort)                                 \
    X(FerryControl__OutgoingAborted, OUTGOING_ABORTED, outgoing_aborted)                           \
    X(FerryControl__PageChannelOpen, PAGE_CHANNEL_OPEN, page_channel_open)                         \
    X(FerryControl__PageChannelAccepted, PAGE_CHANNEL_ACCEPTED, page_channel_accepted)             \
    X(FerryControl__LazyReady, LAZY_READY, lazy_ready)                                             \
    X(FerryControl__ResumeRequest, RESUME_REQUEST, resume_request)                                 \
    X(FerryControl__ResumeDecision, RESUME_DECISION, resume_decision)                              \
    X(FerryControl__OutgoingCommitted, OUTGOING_COMMITTED, outgoing_committed)                     \
    X(FerryControl__LazyStart, LAZY_START, lazy_start)                                             \
    X(FerryControl__OutgoingPrepare, OUTGOING_PREPARE, outgoing_prepare)                           \
    X(FerryControl__OutgoingPrepared, OUTGOING_PREPARED, outgoing_prepared)                        \
    X(FerryControl__PoolOpen, POOL_OPEN, pool_open)                                                \
    X(FerryControl__PoolAccepted, POOL_ACCEPTED, pool_accepted)                                    \
    X(FerryControl__OutgoingHandoff, OUTGOING_HANDOFF, outgoing_handoff)                           \
    X(FerryControl__OutgoingHandedOff, OUTGOING_HANDED_OFF, outgoing_handed_off)                   \
    X(FerryControl__PageHoles, PAGE_HOLES, page_holes)                                             \
    X(FerryControl__OutgoingHandoffCancel, OUTGOING_HANDOFF_CANCEL, outgoing_handoff_cancel)       \
    X(FerryControl__IncomingWarm, INCOMING_WARM, incoming_warm)                                    \
    X(FerryControl__IncomingMounts, INCOMING_MOUNTS, incoming_mounts)                              \
    X(FerryControl__WarmReady, WARM_READY, warm_ready)                                             \
    X(FerryControl__HeldPackets, HELD_PACKETS, held_packets)                                       \
    X(FerryControl__LazyAreasReady, LAZY_AREAS_READY, lazy_areas_ready)                            \
    X(FerryControl__PageHolesScan, PAGE_HOLES_SCAN, page_holes_scan)                               \
    X(FerryControl__LazyTasksRun, LAZY_TASKS_RUN, lazy_tasks_run)                                  \
    X(FerryControl__RestoreProgress, RESTORE_PROGRESS, restore_progress)                           \
    X(FerryControl__MigratorAlive, MIGRATOR_ALIVE, migrator_alive)                                 \
    X(FerryControl__LazyCopyDiscarded, LAZY_COPY_DISCARDED, lazy_copy_discarded)                   \
    X(FerryControl__PrecopyPlan, PRECOPY_PLAN, precopy_plan)                                       \
    X(FerryControl__PrecopyValid, PRECOPY_VALID, precopy_valid)

#define FERRY_CONTROL_WRAP(type, upper, field)                                                     \
    inline envelope wrap(type& m) {                                                                \
        envelope e = FERRY_CONTROL__ENVELOPE__INIT;                                                \
        e.body_case = FERRY_CONTROL__ENVELOPE__BODY_##upper;                                       \
        e.field = &m;                                                                              \
        return e;                                                                                  \
    }
FERRY_CONTROL_BODIES(FERRY_CONTROL_WRAP)
#undef FERRY_CONTROL_WRAP

template <typename Msg>
void send_message(net::stream& s, Msg& m, net::deadline until) {
    send(s, wrap(m), until);
}
template <typename Msg>
void send_message(int fd, Msg& m, net::deadline until) {
    send(fd, wrap(m), until);
}

void send_error(net::stream& s, const std::string& message, net::deadline until);
void send_error(int fd, const std::string& message, net::deadline until);

// Best-effort sends, for messages whose loss changes nothing the sender
// decides (a progress report, a refusal to a peer that may be gone): false
// if the message could not be sent. Never throws.
bool try_send(net::stream& s, const envelope& e, net::deadline until) noexcept;
bool try_send(int fd, const envelope& e, net::deadline until) noexcept;
template <typename Conn, typename Msg>
bool try_send_message(Conn&& c, Msg& m, net::deadline until) noexcept {
    try {
        return try_send(c, wrap(m), until);
    } catch (const std::exception&) {
        return false; // wrap allocates
    }
}
bool try_send_error(net::stream& s, const std::string& message, net::deadline until) noexcept;
bool try_send_error(int fd, const std::string& message, net::deadline until) noexcept;

// The body's name, for error messages.
[[nodiscard]] const char* body_name(const envelope& e) noexcept;

// Throws ferry::error unless `e` carries `want`; an error_reply body becomes
// an error carrying the peer's message, prefixed by `peer`.
void expect(const envelope* e, FerryControl__Envelope__BodyCase want, const std::string& peer);

} // namespace ferry::control
