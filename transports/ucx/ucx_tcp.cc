// The UCX context's settings where tcp carries the off-node traffic: whether
// it does (UCX_TLS, or UCX's RDMA devices), and then sends by copy instead of
// zero-copy, around a UCX 1.13 tcp bug that aborts a rank whose peer died
// mid-send. Separate from the worker's start (ucx_worker.cc), which applies
// it: a workaround with its own reasons and measurements.
#include <uct/api/uct.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/log.h"
#include "transports/ucx/ucx_setup_internal.h"

namespace bc {
namespace {

// Whether this process's off-node traffic goes over tcp, and why (for the
// log). A UCX_TLS list decides where the user gave one (tcp in it and no RDMA
// transport); otherwise, and for "^..." or "all", whether UCX has an ib or ugni
// memory domain with a device. A verbs device that UCX lists but the traffic
// does not use (a RoCE NIC run as plain Ethernet, EFA) reads as RDMA there:
// UCX_TLS=tcp settles it.
bool tcp_is_the_network(std::string *why) {
  const char *tls = std::getenv("UCX_TLS");
  if (tls && *tls && *tls != '^') {
    bool tcp = false, rdma = false, all = false;
    std::string list(tls), token;
    for (size_t pos = 0; pos <= list.size(); ++pos) {
      if (pos < list.size() && list[pos] != ',') {
        token += list[pos];
        continue;
      }
      tcp = tcp || token == "tcp";
      all = all || token == "all";
      for (const char *prefix : {"rc", "ud", "dc", "ib", "ugni", "mlx"})
        rdma = rdma || token.rfind(prefix, 0) == 0;
      token.clear();
    }
    if (!all) {
      *why = std::string("UCX_TLS=") + tls + (tcp && !rdma ? " has tcp and no RDMA transport" : " decides");
      return tcp && !rdma;
    }
  }
  uct_component_h *components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) {
    *why = "UCX could not list its components";
    return false;
  }
  std::string rdma;
  for (unsigned i = 0; i < count && rdma.empty(); ++i) {
    uct_component_attr_t attr;
    std::memset(&attr, 0, sizeof attr);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[i], &attr) != UCS_OK) continue;
    const std::string name = attr.name;
    if (attr.md_resource_count > 0 && (name == "ib" || name.rfind("ugni", 0) == 0)) rdma = name;
  }
  uct_release_component_list(components);
  *why = rdma.empty() ? "no ib or ugni device" : "UCX has " + rdma + " devices";
  return rdma.empty();
}

}  // namespace

// UCX 1.13's tcp transport completes an active-message zero-copy send twice
// when its socket fails part-way through the send (uct_tcp_ep_sendv: once in
// the purge that the send error starts, once more on return), and the second
// completion aborts the process on UCX's assertion 'comp->count > 0' (in a
// build without assertions: a second callback on a request that may be
// reused). That is a rank dying because a peer died during a transfer to it
// (1 in 20 runs of liveness_kill_sim_ucx; docs/FAILURES.md). Where tcp is the
// network, this context sends by copy: no zero-copy threshold, and 64 KiB
// send segments (UCX's tcp default is 8 KiB; zero-copy sent 64 KiB per
// message), so that a copy costs the same system calls as zero-copy did.
// Measured on layout d of scripts/bench (1 Gbit/s): the same times at 4 KiB-
// 16 MiB within the noise; with 8 KiB segments 256-512 KiB took 1.3-1.7x
// longer. The user's environment variables win: UCX_ZCOPY_THRESH, and
// UCX_TCP_TX_SEG_SIZE or UCX_TCP_RX_SEG_SIZE (a send segment larger than the
// receive segment makes UCX refuse the interface). Set in ucx.conf instead,
// they are overridden.
Status avoid_tcp_zcopy(ucp_config_t *config) {
  std::string why;
  if (!tcp_is_the_network(&why)) {
    BC_DEBUGLOG(Transport, "ucx: zero-copy sends as UCX chooses (%s)", why.c_str());
    return BC_OK;
  }
  // {the variables that leave it to the user, the key for ucp_config_modify,
  // the value}; a transport's key goes without its prefix (UCX applies it to
  // every interface that has it: tcp alone has TX_SEG_SIZE).
  struct Setting {
    const char *user[2];
    const char *key, *value;
  };
  const Setting settings[] = {{{"UCX_ZCOPY_THRESH", nullptr}, "ZCOPY_THRESH", "inf"},
                              {{"UCX_TCP_TX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE"}, "TX_SEG_SIZE", "64k"}};
  std::string done;
  for (const Setting &setting : settings) {
    if (std::getenv(setting.user[0]) || (setting.user[1] && std::getenv(setting.user[1]))) continue;
    ucs_status_t s = ucp_config_modify(config, setting.key, setting.value);
    if (s != UCS_OK)
      return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx: cannot set %s=%s: %s", setting.key, setting.value,
                     ucs_status_string(s));
    done += std::string(done.empty() ? "" : ", ") + setting.key + "=" + setting.value;
  }
  BC_DEBUGLOG(Transport, "ucx: tcp is the network (%s): sends by copy (%s; docs/FAILURES.md)", why.c_str(),
              done.empty() ? "the user's UCX settings kept" : done.c_str());
  return BC_OK;
}

}  // namespace bc
