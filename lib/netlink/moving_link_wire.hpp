// link_identity and ipv4_route on the control connection (control.proto's
// moving_link and moving_route).
#pragma once

#include "netlink/link_identity.hpp"
#include "wire/control.pb-c.h"

#include <string>
#include <vector>

namespace ferry::netlink {

// The messages for `links`, valid while this lives (it owns their storage).
class moving_link_messages {
  public:
    explicit moving_link_messages(const std::vector<link_identity>& links);
    moving_link_messages(const moving_link_messages&) = delete;
    moving_link_messages& operator=(const moving_link_messages&) = delete;

    std::vector<FerryControl__MovingLink*> pointers;

  private:
    std::vector<link_identity> _links;
    std::vector<FerryControl__MovingLink> _messages;
    std::vector<std::vector<std::string>> _text;
    std::vector<std::vector<char*>> _text_pointers;
};

// The links a peer sent; throws ferry::error on a malformed one.
std::vector<link_identity> from_messages(FerryControl__MovingLink* const* links, size_t n);

// The messages for `routes`, valid while this lives.
class moving_route_messages {
  public:
    explicit moving_route_messages(const std::vector<ipv4_route>& routes);
    moving_route_messages(const moving_route_messages&) = delete;
    moving_route_messages& operator=(const moving_route_messages&) = delete;

    std::vector<FerryControl__MovingRoute*> pointers;

  private:
    std::vector<ipv4_route> _routes;
    std::vector<FerryControl__MovingRoute> _messages;
    std::vector<std::string> _destinations, _gateways;
};

// The routes a peer sent; throws ferry::error on a malformed one.
std::vector<ipv4_route> from_messages(FerryControl__MovingRoute* const* routes, size_t n);

} // namespace ferry::netlink
