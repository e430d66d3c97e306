#include "pool_node.hpp"

#include "sys/net.hpp"

#include <sys/uio.h>

#include <vector>

namespace ferry::pagesrv {

void serve_pool_connection(net::stream& conn, const FerryControl__PoolOpen& open, pool_store& store,
                           object_access& access, pool_rdma_export* rdma, spdlog::logger& log) {
    const std::string client =
        fmt::format("{} ({})", open.client ? open.client : "client", conn.peer_identity());
    const std::string& peer = conn.peer_identity();
    FerryControl__PoolAccepted ok = FERRY_CONTROL__POOL_ACCEPTED__INIT;
    ok.chunk_size = store.config().chunk_size;
    ok.capacity_bytes = store.config().capacity_bytes;
    const std::string eviction = store.config().eviction;
    ok.eviction = const_cast<char*>(eviction.c_str());
    FerryControl__PoolRdmaRegion region = FERRY_CONTROL__POOL_RDMA_REGION__INIT;
    transport::rdma::channel_token token;
    if (rdma) {
        rdma->describe(region, token);
        ok.rdma = &region;
    }
    control::send_message(conn, ok, net::after(std::chrono::seconds(10)));
    net::set_nodelay(conn.fd());

    // Allocated once per connection: the request loop allocates nothing.
    std::vector<std::byte> meta(pool::max_meta_len), data(pool::max_data_len);
    for (;;) {
        pool::header_bytes h;
        if (!net::read_full(conn, h, net::no_deadline, "read pool request"))
            return; // the client hung up
        pool::request req;
        if (auto err = pool::decode(h, req); err != pool::decode_error::none) {
            log.warn("pool client {}: malformed request ({}); closing", client,
                     pool::to_string(err));
            return;
        }
        if (req.operation == pool::op::put && req.data_len > store.config().chunk_size) {
            log.warn("pool client {}: a {}-byte chunk exceeds the {}-byte chunk size; closing",
                     client, req.data_len, store.config().chunk_size);
            return;
        }
        const auto payload_until = net::after(std::chrono::seconds(30));
        if (req.meta_len)
            net::read_full(conn, std::span(meta.data(), req.meta_len), payload_until,
                           "read pool chunk metadata");
        if (req.data_len)
            net::read_full(conn, std::span(data.data(), req.data_len), payload_until,
                           "read pool chunk");

        pool::reply rep{pool::status::ok, pool::tier::none, req.object, req.chunk, 0, 0,
                        req.request_id};
        std::string stats;
        switch (req.operation) {
        case pool::op::put:
            rep.result =
                !access.admit_write(req.object, peer)
                    ? pool::status::forbidden
                    : store.put(req.object, req.chunk, std::span(meta.data(), req.meta_len),
                                std::span(data.data(), req.data_len));
            break;
        case pool::op::get:
            rep.result = !access.admit_read(req.object, peer)
                             ? pool::status::forbidden
                             : store.get(req.object, req.chunk, meta.data(), rep.meta_len,
                                         data.data(), rep.data_len, rep.served_from);
            break;
        case pool::op::drop:
            if (access.admit_read(req.object, peer)) {
                (void)store.drop(req.object);
                access.forget(req.object);
            } else {
                rep.result = pool::status::forbidden;
            }
            break;
        case pool::op::grant: {
            const std::string to(reinterpret_cast<const char*>(meta.data()), req.meta_len);
            if (!access.grant(req.object, peer, to))
                rep.result = pool::status::forbidden;
            else
                log.debug("pool client {}: {} may use object {:x}", client, to, req.object);
            rep.meta_len = 0;
            break;
        }
        case pool::op::stats:
            stats = store.stats_json();
            rep.data_len = uint32_t(std::min(stats.size(), size_t(pool::max_data_len)));
            break;
        case pool::op::ping:
            break;
        }
        if (rep.result == pool::status::forbidden)
            log.warn("pool client {}: {} of object {:x} refused: not one of its members", client,
                     pool::to_string(req.operation), req.object);
        if (rep.result != pool::status::ok)
            rep.meta_len = rep.data_len = 0;
        auto hdr = pool::encode(rep);
        iovec iov[3] = {
            {hdr.data(), hdr.size()},
            {meta.data(), rep.meta_len},
            {stats.empty() ? static_cast<void*>(data.data()) : stats.data(), rep.data_len}};
        net::writev_full(conn, iov, 3, net::after(std::chrono::seconds(30)), "send pool reply");
    }
}

} // namespace ferry::pagesrv
