#include "pool_rdma.hpp"

#include "core/error.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace ferry::pagesrv {

namespace rdma = transport::rdma;

namespace {

constexpr uint64_t export_wake_tag = 0;
constexpr uint64_t export_listener_tag = 1;
constexpr size_t max_clients = 256;
// Clients only READ: no receives to speak of, no sends.
const rdma::queue_sizes client_queues{.send = 4, .recv = 4, .message_bytes = 64};

} // namespace

pool_rdma_export::pool_rdma_export(pool_store& store, std::shared_ptr<spdlog::logger> log)
    : _log(std::move(log)), _arena(store.arena()), _wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      _epoll(::epoll_create1(EPOLL_CLOEXEC)) {
    if (!_wake || !_epoll)
        throw sys_error("eventfd/epoll for the pool's RDMA export");
    _listener = rdma::rdma_listener::bind_any();
    ibv_pd* pd = _listener->pd();
    _chunks_mr = rdma::register_memory(pd, _arena.chunks, _arena.chunks_len, IBV_ACCESS_REMOTE_READ,
                                       "the pool arena");
    _meta_mr = rdma::register_memory(pd, _arena.meta, _arena.meta_len, IBV_ACCESS_REMOTE_READ,
                                     "the pool arena's metadata");
    _directory_mr = rdma::register_memory(pd, _arena.directory->data(), _arena.directory->size(),
                                          IBV_ACCESS_REMOTE_READ, "the pool directory");
    rdma::epoll_watch(_epoll.get(), _wake.get(), export_wake_tag);
    rdma::epoll_watch(_epoll.get(), _listener->fd(), export_listener_tag);
    _log->info("pool node: one-sided reads over RDMA on port {} (any authenticated pool client "
               "may read any object's chunks this way)",
               _listener->port());
    _thread = std::thread([this] { run(); });
}

pool_rdma_export::~pool_rdma_export() {
    _stopping = true;
    const uint64_t one = 1;
    (void)!::write(_wake.get(), &one, sizeof one);
    _thread.join();
    _clients.clear(); // their QPs before the MRs
}

void pool_rdma_export::describe(FerryControl__PoolRdmaRegion& r, rdma::channel_token& token) {
    token = _tokens.issue();
    r.port = _listener->port();
    r.directory_addr = reinterpret_cast<uintptr_t>(_directory_mr->addr);
    r.directory_rkey = _directory_mr->rkey;
    r.directory_buckets = _arena.directory->buckets();
    r.arena_addr = reinterpret_cast<uintptr_t>(_chunks_mr->addr);
    r.arena_rkey = _chunks_mr->rkey;
    r.meta_addr = reinterpret_cast<uintptr_t>(_meta_mr->addr);
    r.meta_rkey = _meta_mr->rkey;
    r.meta_stride = _arena.meta_stride;
    r.token.data = reinterpret_cast<uint8_t*>(token.data());
    r.token.len = token.size();
}

void pool_rdma_export::run() {
    epoll_event events[16];
    while (!_stopping.load()) {
        const int n = ::epoll_wait(_epoll.get(), events, 16, 500);
        for (int i = 0; i < n; i++) {
            const uint64_t tag = events[i].data.u64;
            if (tag == export_wake_tag)
                continue;
            if (tag == export_listener_tag) {
                try {
                    auto admit = [this,
                                  tokens = _tokens.admission()](std::span<const std::byte> hello) {
                        return _clients.size() < max_clients
                                   ? tokens(hello)
                                   : std::optional<std::vector<std::byte>>{};
                    };
                    auto c = _listener->accept(admit, client_queues, std::chrono::seconds(5));
                    if (!c) {
                        _log->warn("pool node: refused an RDMA connect without a valid token");
                        continue;
                    }
                    rdma::epoll_watch(_epoll.get(), c->cm_fd(),
                                      reinterpret_cast<uintptr_t>(c.get()));
                    _clients.push_back(std::move(c));
                } catch (const std::exception& e) {
                    _log->warn("pool node: an RDMA connect failed: {}", e.what());
                }
                continue;
            }
            auto* c = reinterpret_cast<rdma::rdma_connection*>(tag);
            if (c->disconnected())
                std::erase_if(_clients, [&](const auto& p) { return p.get() == c; });
        }
    }
}

} // namespace ferry::pagesrv
