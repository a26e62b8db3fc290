// The table of the BC_* parameter registry: every knob's name, type, default,
// choices or range, and its documentation (what bc_info --params prints and
// docs/ derive from). Separate from the machinery that parses and checks the
// values (params.cc): a new or reworded knob is a change to this file only.
#include "core/params_internal.h"

#include "bc_config.h"  // BC_CHECK_ARGS_DEFAULT

namespace bc {

// The registry. Keep the rows in ParamId order; the [params] unit test checks it.
constexpr ParamDef kParamDefs[] = {
    {ParamId::Debug, "BC_DEBUG", ParamType::String, "",
     nullptr, kParamAnyRange,
     "Log level and subsystems, comma separated: a level (NONE ERROR WARN INFO DEBUG TRACE) "
     "and/or subsystems (INIT TOPO PLAN SCHED TRANSPORT API PMPI). 'PLAN' alone prints each "
     "plan at INFO. Default: warnings and errors (nothing at all under the PMPI preload)."},
    {ParamId::DebugFile, "BC_DEBUG_FILE", ParamType::String, "", nullptr, kParamAnyRange,
     "Write log lines to this file instead of stderr; %h = host, %p = pid, %r = world rank."},
    {ParamId::Topo, "BC_TOPO", ParamType::String, "", nullptr, kParamAnyRange,
     "Virtual hierarchy, fastest level first, grouping ranks in rank order. '2x2x2': 2 ranks per "
     "node, 2 nodes per rack, 2 racks. Levels are separated by 'x' or '/'; a level is one number "
     "(every unit the same) or a comma list of unit sizes ('3,2,3' = nodes of 3, 2 and 3 ranks). "
     "The top level may be left out: the remaining units form one group. Empty: detect nodes "
     "with MPI_COMM_TYPE_SHARED, then BC_TOPO_FILE (or the scheduler's levels: BC_TOPO_SCHEDULER, "
     "BC_TOPO_ADDR) and BC_TOPO_INTRA."},
    {ParamId::TopoFile, "BC_TOPO_FILE", ParamType::String, "", nullptr, kParamAnyRange,
     "Levels above the node: a file of lines 'HOSTNAME GROUP [GROUP2 ...]' (e.g. 'node07 rack1 "
     "row0'); '#' starts a comment. Each column adds one level, slower than the last. Every host "
     "of the job must be listed. Takes precedence over the scheduler's levels (BC_TOPO_SCHEDULER, "
     "BC_TOPO_ADDR). bc_info --topology-file PATH writes the detected levels in this format."},
    {ParamId::TopoIntra, "BC_TOPO_INTRA", ParamType::Enum, "none", "none|package|numa", kParamAnyRange,
     "Add a level inside the node from the hwloc tree: ranks bound to the same package (socket) "
     "or NUMA node form a group. Ranks that are not bound within one such object ignore it."},
    {ParamId::TopoScheduler, "BC_TOPO_SCHEDULER", ParamType::Enum, "auto", "auto|off", kParamAnyRange,
     "Levels above the node from the batch scheduler, when neither BC_TOPO nor BC_TOPO_FILE is set. "
     "auto: read Slurm's SLURM_TOPOLOGY_ADDR and SLURM_TOPOLOGY_ADDR_PATTERN when both are set (the "
     "topology/tree plugin sets them per task, e.g. 's0.s10.node17' and 'switch.switch.node'; "
     "topology/block gives 'block.node'): the innermost switch (or block) is the rack level, the next "
     "level3, and so on; levels where every unit has one child are dropped, so a cluster on one "
     "switch gets none. A pattern whose last field is not 'node' is an error. off: ignore Slurm's variables. Every rank must see the same "
     "kind of address (all Slurm, all BC_TOPO_ADDR, or none), else communicator creation fails on "
     "every rank with BC_ERR_TOPOLOGY. BC_TOPO_ADDR, when set, is used whatever this says."},
    {ParamId::TopoAddr, "BC_TOPO_ADDR", ParamType::String, "", nullptr, kParamAnyRange,
     "This rank's place in the network for any launcher: the switches above its node, outermost "
     "first, then the node name, separated by dots (e.g. 'spine1.rack3.host17'; the format of Slurm's "
     "SLURM_TOPOLOGY_ADDR). A launcher wrapper exports it per rank (from PBS, Kubernetes labels, a "
     "CMDB); used instead of Slurm's variables. The node level itself still comes from "
     "MPI_COMM_TYPE_SHARED and the node name is not used. Ignored when BC_TOPO or BC_TOPO_FILE is set."},
    {ParamId::TopoDiscover, "BC_TOPO_DISCOVER", ParamType::Enum, "auto", "auto|always|off", kParamAnyRange,
     "Discover a rack level above the nodes by measurement when nothing else gives one (no BC_TOPO, "
     "BC_TOPO_FILE, BC_TOPO_ADDR or Slurm address) and the communicator spans at least 3 nodes: one "
     "rank per node times concurrent exchanges of 512 KiB with other nodes in log2(nodes) rounds, "
     "repeated until conclusive passes agree (3 for racks, 2 for none; at most 6), and nodes whose flows stay fast form a rack (docs/TOPOLOGY.md; "
     "0.1-0.6 s on 4 simulated nodes at 250 Mbit/s); never a level the measurement does not support. auto: measure once per set of hosts; the result, rack level or none, is kept "
     "for later communicators of the process and in the per-user cache (racks-HASH.txt in "
     "BC_CACHE_DIR, keyed by the nodes' hosts in rank order, ignored after BC_MODEL_CACHE_AGE, an "
     "inconclusive result after 10 min) for later jobs on the same hosts. always: measure at every communicator creation, without either "
     "cache (still writes the file). off: no discovery. Where BC_TOPO_FILE or an address gives "
     "the racks (3 nodes or more), auto and always measure them the same way to check them, once per "
     "process: INFO when the network agrees, a WARN naming both groupings when it finds other racks "
     "(or none where a file or BC_TOPO_ADDR gives some); the given levels are used either way (off: "
     "no check; docs/TOPOLOGY.md). Every rank must use the same value."},
    {ParamId::Transport, "BC_TRANSPORT", ParamType::Enum, "auto", "auto|mpi|ucx|shm", kParamAnyRange,
     "Transport for every stage. auto: the best available per stage; a forced transport that "
     "cannot serve a stage is an error at communicator creation."},
    {ParamId::Algo, "BC_ALGO", ParamType::Enum, "auto", "auto|ring|rhd|direct", kParamAnyRange,
     "Algorithm for every stage: ring, recursive halving/doubling (rhd; a group that is not a "
     "power of two folds pairs into one first) or direct exchange. auto: inside the node rhd for "
     "power-of-two groups, else ring; above the node the ring (the cost model, BC_MODEL, picks "
     "per stage instead when it is on). A forced algorithm whose preconditions fail for a group "
     "is an error."},
    {ParamId::Timeout, "BC_TIMEOUT", ParamType::Seconds, "30m", nullptr, {0, 24 * kHour, nullptr},
     "A collective that waits longer than this for a living peer fails with BC_ERR_TIMEOUT and "
     "marks the communicator broken. Lateness, not death: a peer that died is reported within "
     "about a second as BC_ERR_PEER_DEAD (BC_LIVENESS), so this only has to cover a peer that is "
     "alive but busy (a checkpoint, a slow data loader). 30 minutes, as PyTorch's default; set it "
     "shorter to give up on late peers sooner. Units: ms, s, m, h; a bare number is seconds. "
     "0 waits forever (longer than a day, use 0)."},
    {ParamId::SpinCount, "BC_SPIN_COUNT", ParamType::Int, "0", nullptr,
     {1, 1000000, "auto"},
     "Idle work without any completion before the waiting thread yields the core "
     "(sched_yield; or sleeps on UCX's event fd, BC_UCX_WAIT=event); it pauses the core per unit "
     "meanwhile. A unit is a poll, plus one per transport request the poll tested: a waiter on k "
     "requests yields every BC_SPIN_COUNT/(k+1) polls. The same for every waiter: blocking calls, "
     "bc_wait, a loop of bc_test, the progress thread. 0 (auto) decides per communicator at its "
     "creation: 64 while each of its ranks on a node has a CPU of its own (the union of their "
     "affinity masks has at least as many CPUs as there are ranks), else 1, a yield after every "
     "idle poll as MPI's yield_when_idle: the rank waited for may need this very core (4 ranks on "
     "2 cores: 8 B all-reduces 9-15 us spinning 64, 7-9 us yielding; BC_DEBUG=INFO prints the "
     "choice). At the maximum, 10^6 polls, a waiting rank can hold its core for about a second "
     "before it lets another rank run."},
    {ParamId::MaxPlanCache, "BC_PLAN_CACHE", ParamType::Int, "32", nullptr, {1, 4096, nullptr},
     "Plans kept per communicator (one per element count and collective); each holds every "
     "step of this rank's program, so thousands are already a lot of memory."},
    {ParamId::Disable, "BC_DISABLE", ParamType::Bool, "0", nullptr, kParamAnyRange,
     "PMPI preload: 1 passes every call straight to the MPI library."},
    {ParamId::PmpiStats, "BC_PMPI_STATS", ParamType::String, "", nullptr, kParamAnyRange,
     "PMPI preload: at MPI_Finalize, write how many calls of each collective BlueConnect served "
     "and how many it passed to MPI (and why) to this file; %r = world rank, %p = pid, %h = host, '-' or '1' = stderr. "
     "A path without %r or %p in a job of more than one rank gets .RANK appended, so that ranks never overwrite "
     "each other's file."},
    {ParamId::PmpiMinBytes, "BC_PMPI_MIN_BYTES", ParamType::Bytes, "0", nullptr, {0, kParamNoMax, nullptr},
     "PMPI preload: messages smaller than this go to the MPI library unchanged."},
    {ParamId::ShmMode, "BC_SHM_MODE", ParamType::Enum, "auto", "auto|cma|copy", kParamAnyRange,
     "Shared-memory transport: cma = single copy with process_vm_readv; copy = through the "
     "shared segment (two copies); auto = cma where the kernel allows it, else copy."},
    {ParamId::ShmChunk, "BC_SHM_CHUNK", ParamType::Bytes, "256K", nullptr, {64, 64 * kMiB, nullptr},
     "Shared-memory transport: bytes per chunk of a copied message (copy mode). Rounded up to "
     "64 bytes (a cache line); the segment holds several chunks per pair of ranks, hence the maximum."},
    {ParamId::ShmEager, "BC_SHM_EAGER", ParamType::Bytes, "16K", nullptr, {0, 64 * kKiB, nullptr},
     "Shared-memory transport: messages up to this size are copied into the segment and the send "
     "completes at once (no system call, no wait for the receiver); larger ones take the cma or "
     "copy path. 0 turns it off. Rounded up to 64 bytes; the segment reserves 8 such areas per "
     "pair of ranks, so the maximum bounds it (pages are only allocated once used; 16K: 128 KiB "
     "per pair, 7 MiB at 8 ranks, 0.5 GiB of address space at 64; where /dev/shm has less room, "
     "the areas halve until they fit, down to 64 B, then go, with a warning). 16K, not 4K: 8-16 KiB "
     "all-reduces at np 4 on 2 cores took 23-37 us with 4K, 11-15 with 16K (a single-copy send "
     "waits for its receiver to be scheduled)."},
    {ParamId::MpiTagUb, "BC_MPI_TAG_UB", ParamType::Int, "0", nullptr, {0, 2147483647, nullptr},
     "For tests: the transports that send over MPI (mpi, cuda) take this as MPI_TAG_UB when it is "
     "smaller than MPI's own (0: MPI's). BlueConnect's tags need 31 bits (program tag and chunk "
     "sequence number, transports/transport.h); such a transport refuses to start below that "
     "rather than fold tags, so this shows what a job on Open MPI's pml ucx (MPI_TAG_UB 2^23-1) gets."},
    {ParamId::UcxWait, "BC_UCX_WAIT", ParamType::Enum, "yield", "yield|event", kParamAnyRange,
     "UCX transport, when a wait finds nothing to do: yield the core (sched_yield), or sleep on "
     "the worker's event fd (ucp_worker_arm) until the network wakes it."},
    {ParamId::UcxRndvThresh, "BC_UCX_RNDV_THRESH", ParamType::Bytes, "512K", nullptr, {0, kGiB, nullptr},
     "UCX transport: messages up to this size go eagerly, larger ones by rendezvous (UCX's "
     "RNDV_THRESH for this library's own UCX context; UCX_RNDV_THRESH in the environment wins). "
     "UCX's own choice over TCP sent 32 KiB by rendezvous, one extra round trip: a 32 KiB "
     "all-reduce through node leaders took 1000 us instead of 640 us (2 simulated nodes, "
     "100 us links). Above 512 KiB the extra round trip is small against the transfer (the "
     "cost model's chunks of up to 1 MiB send at most 512 KiB per message across nodes with "
     "2 or more ranks per node); above 1G nothing is sent eagerly in practice."},
    {ParamId::Chunk, "BC_CHUNK", ParamType::Bytes, "1M", nullptr, {4 * kKiB, kGiB, "one chunk"},
     "All-reduce pipelining: the buffer is cut into chunks of about this many bytes that stream "
     "through the stages one after another (0 = one chunk). Smaller chunks overlap the stages "
     "more but pay each step's latency more often. At least 4K: below that the per-chunk "
     "overhead (every step's latency, tens of microseconds, once per chunk) dominates the "
     "transfer itself; BC_CHUNK=1 made a 400 KB all-reduce take 6.5 s. At most 1G, so that "
     "every message stays under MPI's 2 GiB count limit."},
    {ParamId::PipelineDepth, "BC_PIPELINE_DEPTH", ParamType::Int, "4", nullptr, {1, 1024, nullptr},
     "All-reduce pipelining: chunks in flight at once. Each one in flight holds its own "
     "scratch buffer and posted messages; beyond 1024 that costs more than it overlaps."},
    {ParamId::Plan, "BC_PLAN", ParamType::String, "-32K:shape=leader,top=all", nullptr, kParamAnyRange,
     "Plan per message size, overriding the built-in choice: '|'-separated rules "
     "'MIN-MAX:shape=split|leader|flat,algo=auto|ring|rhd|direct[/...],top=rd|all|split,chunk=BYTES,depth=N' (bytes of the "
     "whole buffer, MAX excluded, either side optional; first match wins), e.g. "
     "'-32K:shape=leader,algo=direct|32K-:chunk=4M'. Unset settings come from BC_ALGO, BC_CHUNK, "
     "BC_PIPELINE_DEPTH. The default sends buffers under 32 KiB through node leaders and one "
     "exchange among them (top=all: one step, the fewest rounds); larger ones take BlueConnect's split. BC_PLAN= (empty) means the "
     "split for every size. With a cost model (BC_MODEL) the default rules give way to the "
     "model's choice; rules set here still override it."},
    {ParamId::Model, "BC_MODEL", ParamType::Enum, "auto", "auto|calibrate|off", kParamAnyRange,
     "The alpha-beta cost model that chooses the plan per size (shape, top, algorithm per stage, "
     "chunk, depth; docs/PLANS.md). calibrate: measure every level's algorithms at communicator "
     "creation (a few dozen short collectives per level, about 1 s on the simulated 4-node cluster); "
     "auto: calibrate when the communicator "
     "spans more than one node, else off; off: the fixed defaults of BC_PLAN, BC_CHUNK, "
     "BC_PIPELINE_DEPTH. Knobs set explicitly (BC_ALGO, BC_CHUNK, BC_PIPELINE_DEPTH, BC_PLAN) "
     "override the model's choice."},
    {ParamId::ModelFile, "BC_MODEL_FILE", ParamType::String, "", nullptr, kParamAnyRange,
     "Cost model cache: when the model is on and this file holds a model for the same layout, "
     "it is loaded instead of calibrating; otherwise rank 0 writes the calibrated model here. "
     "Text, one 'fit LEVEL ALGO ALPHA BETA' line per level and algorithm (docs/PLANS.md)."},
    {ParamId::ModelCache, "BC_MODEL_CACHE", ParamType::Enum, "on", "on|off", kParamAnyRange,
     "Per-user cache of calibrated cost models across jobs: on: rank 0 looks for a model calibrated "
     "earlier for the same layout on the same hosts (file model-KEYHASH.txt in BC_CACHE_DIR) and "
     "broadcasts it instead of calibrating, and writes each new calibration there; a file that is "
     "stale, foreign (another key, user or version), corrupt or writable by others is ignored. "
     "off: neither read nor written. BC_MODEL_FILE, when set, is looked at first (docs/PLANS.md)."},
    {ParamId::ModelCacheAge, "BC_MODEL_CACHE_AGE", ParamType::Seconds, "168h", nullptr, {1000, 8760 * kHour, "no age limit"},
     "Cached cost models older than this are ignored and calibrated anew (and replaced). "
     "A link whose speed changed keeps its host names: clear the cache (docs/PLANS.md) or set "
     "BC_MODEL_CACHE=off after such a change. Units: ms, s, m, h; 0: no age limit."},
    {ParamId::CacheDir, "BC_CACHE_DIR", ParamType::String, "", nullptr, kParamAnyRange,
     "Directory of the per-user cache (BC_MODEL_CACHE). Empty: $XDG_CACHE_HOME/blueconnect, else "
     "$HOME/.cache/blueconnect. Created with mode 0700; it must belong to the user and not be "
     "writable by group or others, else the cache is not used."},
    {ParamId::CudaIpc, "BC_CUDA_IPC", ParamType::Bool, "1", nullptr, kParamAnyRange,
     "Device buffers (CUDA builds): same-node peers use CUDA IPC (1), or go through pinned host "
     "staging like other-node peers (0; for testing the staging path on one node)."},
    {ParamId::CudaIpcCache, "BC_CUDA_IPC_CACHE", ParamType::Int, "64", nullptr, {1, 4096, nullptr},
     "Device buffers (CUDA builds): opened CUDA IPC mappings of peers' buffers kept per communicator; "
     "the least recently used beyond this many are closed. A mapping is also closed "
     "when its peer frees the buffer and sends a new handle for the same address range."},
    {ParamId::CudaStagingChunk, "BC_CUDA_STAGING_CHUNK", ParamType::Bytes, "1M", nullptr, {4 * kKiB, kGiB, nullptr},
     "Device buffers crossing nodes (CUDA builds): size of each pinned host bounce buffer; larger "
     "transfers are cut into pieces of this size, copied and sent in order. Below 4K the "
     "per-piece copy and message overhead dominates."},
    {ParamId::CudaStagingBufs, "BC_CUDA_STAGING_BUFS", ParamType::Int, "8", nullptr, {2, 256, nullptr},
     "Device buffers crossing nodes (CUDA builds): pinned bounce buffers per direction (sends, "
     "receives), at least 2 so that a copy overlaps the previous piece's network transfer; each "
     "is pinned host memory of BC_CUDA_STAGING_CHUNK bytes."},
    {ParamId::ProgressThread, "BC_PROGRESS_THREAD", ParamType::Bool, "0", nullptr, kParamAnyRange,
     "Non-blocking all-reduce: 1 gives each communicator a thread that advances bc_iallreduce "
     "requests while the caller computes; bc_test then only reads a flag and bc_wait sleeps until "
     "the thread has finished the request. The thread sleeps while no request is in flight and "
     "polls (spinning BC_SPIN_COUNT times, then yielding) while one is; blocking calls on the "
     "communicator take it over meanwhile. Read at communicator creation. With the mpi transport "
     "it needs MPI initialised with MPI_Init_thread(MPI_THREAD_MULTIPLE); otherwise the creation "
     "fails (use shm or ucx). 0: progress happens only inside bc_test, bc_wait and blocking calls."},
    {ParamId::PmpiRoute, "BC_PMPI_ROUTE", ParamType::Enum, "learn", "learn|bc", kParamAnyRange,
     "PMPI preload, MPI_Allreduce: learn = per communicator and power-of-two size bucket, the "
     "first calls of a bucket are probes (1 untimed call and 9 timed samples through BlueConnect, "
     "then the same through the MPI library, each back to back; 1 and 3 from 1 MiB up; a sample "
     "is a run of 8 calls up to 4 KiB, 4 at 8 KiB, 2 at 16 KiB, 1 call from 32 KiB), then one "
     "small PMPI_Allreduce agrees on the slowest rank's per-call medians, and BlueConnect takes the bucket when its median is lower "
     "by at least 0.1 us, the MPI library otherwise (docs/PMPI.md; BC_PMPI_STATS lists each bucket's route and times). "
     "A decision for MPI, or for BlueConnect by less than 2x, is looked at again 32 calls later with MPI first, "
     "and every decision again at the "
     "bucket's 4096th and 65536th call; the lowest median of each library over all looks decides. MPI_Iallreduce "
     "follows a bucket's latest decision and goes to BlueConnect before its first. bc = every call "
     "BlueConnect can serve goes to BlueConnect."},
    {ParamId::Liveness, "BC_LIVENESS", ParamType::Enum, "auto", "auto|net|off", kParamAnyRange,
     "How a waiting collective tells a dead peer from a late one (docs/FAILURES.md). auto: a peer "
     "on this host (same host name and boot id, its pid checked at creation) is dead when its "
     "process is gone (/proc/PID: missing, a zombie, or a different start time); any other peer "
     "through a small UCX worker over TCP that holds one connection to it and sees it close "
     "(the kernel closes it when the process dies). net: the TCP watch for every peer, also on "
     "this host (containers with their own pid namespace; tests). off: no checks; a dead peer "
     "surfaces as a transport error or at BC_TIMEOUT. Checks run only while a collective waits "
     "without progress, every BC_LIVENESS_INTERVAL; the fast path never runs them. Read at "
     "communicator creation."},
    {ParamId::LivenessInterval, "BC_LIVENESS_INTERVAL", ParamType::Seconds, "200ms", nullptr,
     {10, 60 * 1000, nullptr},
     "How often a collective that waits without progress checks whether its peers are alive "
     "(BC_LIVENESS), and how long it must have waited before the first check. A death is "
     "reported about one interval after it (plus scheduling delay). Each check reads /proc once "
     "per peer on this host and polls one UCX worker: microseconds. Below 10ms the checks would "
     "cost more than the waits they interrupt; above a minute a death is no longer reported "
     "promptly."},
    {ParamId::CheckArgs, "BC_CHECK_ARGS", ParamType::Bool, BC_CHECK_ARGS_DEFAULT ? "1" : "0", nullptr,
     kParamAnyRange,
     "1: before every collective the ranks agree on its arguments (collective kind, count, dtype, "
     "op) in one small MPI all-reduce on the library's private communicator; a disagreement is "
     "BC_ERR_MISMATCH on every rank, naming the ranks and what each passed, and nothing is sent "
     "(the communicator stays usable). A rank whose own arguments are refused makes the others "
     "fail at once too, instead of waiting BC_TIMEOUT, and a rank that died before its call is named "
     "as dead (BC_ERR_PEER_DEAD, checked every BC_LIVENESS_INTERVAL while the agreement waits). bc_iallreduce returns at once and reports "
     "these from bc_test/bc_wait (the agreement is its request's first phase). Costs one extra MPI round per call (4 us "
     "to hundreds of us on one node, by rank count and load), so it is off in release builds and on by default in debug "
     "builds (meson buildtype=debug). 0: no agreement; a mismatch then ends as a size error on "
     "the ranks that meet the odd messages and BC_ERR_TIMEOUT on those that wait for them "
     "(docs/FAILURES.md, Argument mismatch)."},
    {ParamId::TimelineFile, "BC_TIMELINE_FILE", ParamType::String, "", nullptr, kParamAnyRange,
     "Record when every collective, every step of every chunk and every transfer began and ended, "
     "and write it at the last bc_finalize to this file as Chrome trace events (Perfetto, "
     "chrome://tracing); scripts/timeline-report summarises the ranks' files (per stage; per host, "
     "how long its link had nothing to send). %h = host, %p = pid, %r = world rank; without %r or "
     "%p, '.RANK.json' is appended. Each communicator's creation then also measures the ranks' "
     "clocks against its rank 0 (8 round trips per rank). At most 1048576 events per process "
     "(40 MiB); later ones are counted, not kept. Empty: off (one load per step)."},
    {ParamId::PlanLearn, "BC_PLAN_LEARN", ParamType::Enum, "on", "on|off", kParamAnyRange,
     "on: where the cost model chooses plans (more than one node) or BC_PLAN_CANDIDATES names them, "
     "the first blocking all-reduces of each power-of-two size bucket run the model's 2-3 best plans "
     "in turn on the caller's own data (1 untimed and 3-5 timed calls each), every rank agrees on "
     "the slowest rank's times, and the fastest plan keeps the bucket; it is looked at again at the "
     "bucket's 1024th and 16384th call. Winners are kept in the per-user cache (plans-KEYHASH.txt in "
     "BC_CACHE_DIR, with BC_MODEL_CACHE) and a later job on the same hosts and layout starts with "
     "them, after one untimed and three timed calls that confirm each (slower than 1.25x its cached "
     "time and than the runner-up's: learned again, with a warning). BC_PLAN, BC_ALGO, BC_CHUNK or BC_PIPELINE_DEPTH set by the user pin "
     "the plan: nothing is learned. off: the model's first choice (docs/PLANS.md, Learning)."},
    {ParamId::PlanCandidates, "BC_PLAN_CANDIDATES", ParamType::String, "", nullptr, kParamAnyRange,
     "The plans to learn among, for every size, instead of the model's: up to 4, '|'-separated as BC_PLAN's rules, "
     "each in BC_PLAN's settings (shape=...,algo=...,top=...,chunk=...,depth=...), the first the one kept "
     "unless another is at least 3% faster, e.g. 'chunk=256K,depth=4|chunk=1M,depth=2'. Works on one "
     "node too. Empty: the model's candidates."},
};
// The bound comes from params_internal.h: a row too many does not compile, and
// a missing one leaves the last row zero-filled, without a name.
static_assert(kParamDefs[static_cast<int>(ParamId::Count) - 1].name != nullptr, "one row per ParamId");

}  // namespace bc
