#include "transport/rdma/rdma_backend.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "transport/rdma/rdma_channel.hpp"
#include "transport/rdma/rdma_server.hpp"
#include "transport/staging/advertised_ranges.hpp"
#include "transport/staging/stager.hpp"

namespace ferry::transport::rdma {

const rdma_backend backend_instance;

namespace {

constexpr auto connect_timeout = std::chrono::seconds(10);

// Before the registration: the region file and the listener (so a host
// without an RDMA device fails before the freeze); after: the stager too.
struct rdma_state final : source_state {
    staging::region_file prepared;
    std::unique_ptr<rdma_server> server;
    std::unique_ptr<staging::stager> stager;
    void committed() override {
        if (stager)
            stager->stage_everything();
    }
    // No peer reads the region once the server stops; only then may the
    // stager unmap it.
    ~rdma_state() override {
        if (server)
            server->stop();
        stager.reset();
    }
};

struct rdma_accept final : accept_storage {
    rdma_accept(const staging::stager& stager, FerryControl__PageChannelAccepted& ok)
        : ranges(stager.index(), ok) {}
    staging::advertised_ranges ranges;
    channel_token token;
};

} // namespace

std::unique_ptr<page_channel> rdma_backend::open(std::unique_ptr<net::stream> handshake,
                                                 const FerryControl__PageChannelAccepted& accepted,
                                                 const fabric_spec& spec,
                                                 FerryControl__ChannelKind kind,
                                                 uint32_t max_pages) const {
    return std::make_unique<rdma_channel>(std::move(handshake), accepted, max_pages,
                                          kind == FERRY_CONTROL__CHANNEL_KIND__FAULT,
                                          connect_timeout, patience::scaled(spec.deadline_scale));
}

std::unique_ptr<source_state> rdma_backend::prepare(pid_t root, const std::string& id) const {
    auto st = std::make_unique<rdma_state>();
    st->server = std::make_unique<rdma_server>(make_logger("pagesrv", id));
    st->prepared = staging::prepare_region(root, id);
    st->server->register_region(st->prepared.map(), st->prepared.size());
    return st;
}

std::unique_ptr<source_state> rdma_backend::start(page_source& src,
                                                  std::unique_ptr<source_state> prepared) const {
    auto st = std::make_unique<rdma_state>();
    auto* p = dynamic_cast<rdma_state*>(prepared.get());
    st->server = p && p->server ? std::move(p->server)
                                : std::make_unique<rdma_server>(make_logger("pagesrv", src.id()));
    auto* server = st->server.get();
    st->stager = std::make_unique<staging::stager>(
        src, staging::take_region(p ? std::move(p->prepared) : staging::region_file{}, src.id()),
        [server] { server->pages_staged(); });
    server->serve(*st->stager, patience::scaled(src.deadline_scale()));
    return st;
}

std::unique_ptr<accept_storage> rdma_backend::accept(FerryControl__PageChannelAccepted& ok,
                                                     source_state* state) const {
    auto* st = dynamic_cast<rdma_state*>(state);
    if (!st || !st->stager)
        throw error("the rdma region of this migration was never set up");
    auto a = std::make_unique<rdma_accept>(*st->stager, ok);
    a->token = st->server->issue_token();
    ok.has_rdma_port = true;
    ok.rdma_port = st->server->port();
    ok.has_rdma_region_addr = true;
    ok.rdma_region_addr = st->server->region_addr();
    ok.has_rdma_region_size = true;
    ok.rdma_region_size = st->server->region_size();
    ok.has_rdma_rkey = true;
    ok.rdma_rkey = st->server->rkey();
    ok.has_rdma_token = true;
    ok.rdma_token.data = reinterpret_cast<uint8_t*>(a->token.data());
    ok.rdma_token.len = a->token.size();
    return a;
}

} // namespace ferry::transport::rdma
