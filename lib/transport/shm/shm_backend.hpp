// The shm backend, an emulated one-sided fabric for hosts on one machine.
// Source: the migration's lazy pages are registered as a shared-memory
// region (allocated before the freeze) and a thread stages them into it
// (shm_stager.hpp). Destination: shm_channel.hpp reads the region without
// the source's CPU, paying the link model's cost per operation.
#pragma once

#include "transport/backend.hpp"

namespace ferry::transport::shm {

class shm_backend final : public backend {
  public:
    const char* name() const noexcept override { return "shm"; }
    bool takes_link_model() const noexcept override { return true; }
    std::unique_ptr<page_channel> open(std::unique_ptr<net::stream> handshake,
                                       const FerryControl__PageChannelAccepted& accepted,
                                       const fabric_spec& spec, FerryControl__ChannelKind kind,
                                       uint32_t max_pages) const override;
    std::unique_ptr<source_state> prepare(pid_t root, const std::string& id) const override;
    std::unique_ptr<source_state> start(page_source& src,
                                        std::unique_ptr<source_state> prepared) const override;
    std::unique_ptr<accept_storage> accept(FerryControl__PageChannelAccepted& ok,
                                           source_state* state) const override;
};

extern const shm_backend backend_instance;

} // namespace ferry::transport::shm
