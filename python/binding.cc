// Copyright cxlkv authors.
//
// pybind11 binding of the Region API (include/cxlkv/region.h) and, when
// built with CUDA, of RegionGpu (src/transfer/region_gpu.h). No logic: the
// Python package (python/cxlkv/) builds on it. Every call that can take
// long releases the GIL. Status becomes a Python exception in one place,
// Raise(), using the classes of cxlkv.errors.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cxlkv/delegate.h"
#include "cxlkv/lifecycle.h"
#include "cxlkv/region.h"
#if defined(CXLKV_WITH_CUDA)
#include "kv_layout.h"
#include "region_gpu.h"
#endif

namespace py = pybind11;
using namespace cxlkv;

namespace {

// The one Status -> exception mapping (classes in cxlkv/errors.py).
void Raise(const Status& s) {
  if (s.ok()) return;
  const char* cls = "Error";
  switch (s.code()) {
    case Status::Code::kNotFound:
      cls = "NotFoundError";
      break;
    case Status::Code::kBusy:
      cls = "BusyError";
      break;
    case Status::Code::kNoSpace:
      cls = "NoSpaceError";
      break;
    case Status::Code::kCorruption:
      cls = "CorruptionError";
      break;
    case Status::Code::kInvalidArgument:
      cls = "InvalidArgumentError";
      break;
    case Status::Code::kIOError:
      cls = "IOError";
      break;
    case Status::Code::kUnsupported:
      cls = "UnsupportedError";
      break;
    case Status::Code::kOk:
      break;
  }
  py::gil_scoped_acquire gil;
  py::object type = py::module_::import("cxlkv.errors").attr(cls);
  PyErr_SetString(type.ptr(), s.message().c_str());
  throw py::error_already_set();
}

#if defined(CXLKV_WITH_CUDA)
// A per-block status as (code name, message): batches report, not raise.
py::tuple StatusTuple(const Status& s) {
  return py::make_tuple(std::string(Status::CodeName(s.code())), s.message());
}

// RegionGpu stores' depths: none (all 0, chain heads), or one per key.
void CheckDepths(const std::vector<uint32_t>& depths, size_t keys) {
  if (!depths.empty() && depths.size() != keys)
    Raise(Status::InvalidArgument("store: " + std::to_string(depths.size()) + " depths for " +
                                  std::to_string(keys) + " keys (give one per key, or none)"));
}
#endif

py::dict CountersDict(const Counters& c) {
  py::dict d;
  for (uint32_t i = 0; i < static_cast<uint32_t>(Counter::kCount); ++i)
    d[CounterName(static_cast<Counter>(i))] = c.v[i];
  return d;
}

// A byte view of any C-contiguous buffer (bytes, bytearray, memoryview, numpy).
py::buffer_info Bytes(const py::buffer& b, bool writable) {
  py::buffer_info info = b.request(writable);
  ssize_t expect = info.itemsize;
  for (ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expect)
      throw py::value_error("buffer must be C-contiguous");
    expect *= info.shape[d];
  }
  return info;
}

// A reservation and how BeginWrite ended (delegated writes, delegate.h).
struct PendingWrite {
  WriteLease lease;
  StoreOutcome outcome = StoreOutcome::kStored;
};

// Block ids as any buffer of int32 (numpy.int32 array, array.array("i"), ...).
struct BlockIds {
  const int32_t* data;
  size_t size;
};
BlockIds Ids(const py::buffer& b) {
  py::buffer_info info = Bytes(b, false);
  if (info.itemsize != 4 || (info.format != "i" && info.format != "=i" && info.format != "<i" &&
                             info.format != "l" && info.format != "=l"))
    throw py::value_error("block ids must be int32 (format 'i'), got format '" + info.format + "'");
  return BlockIds{static_cast<const int32_t*>(info.ptr), static_cast<size_t>(info.size)};
}

// Pages of one chunk from (base, block_stride, page_bytes, num_blocks) tuples.
std::vector<PageTensor> PageTensors(
    const std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>>& tensors) {
  std::vector<PageTensor> out;
  out.reserve(tensors.size());
  for (const auto& [base, stride, page, n] : tensors)
    out.push_back(PageTensor{base, stride, page, n});
  return out;
}

WriteToken Token(const std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>& t) {
  return WriteToken{std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t)};
}

}  // namespace

PYBIND11_MODULE(_cxlkv, m) {
  m.doc() =
      "cxlkv: a KV-block store inside a shared memory region (binding; see cxlkv/__init__.py)";

  py::enum_<CoherenceMode>(m, "CoherenceMode")
      .value("HARDWARE", CoherenceMode::kHardware)
      .value("SOFTWARE", CoherenceMode::kSoftware);
  py::enum_<Prefault>(m, "Prefault")
      .value("NONE", Prefault::kNone)
      .value("AT_ATTACH", Prefault::kAtAttach)
      .value("BACKGROUND", Prefault::kBackground)
      .value("METADATA", Prefault::kMetadata);
  py::enum_<StoreOutcome>(m, "StoreOutcome")
      .value("STORED", StoreOutcome::kStored)
      .value("DUPLICATE", StoreOutcome::kDuplicate)
      .value("FULL", StoreOutcome::kFull)
      .value("TOO_LARGE", StoreOutcome::kTooLarge)
      .value("LOST_RACE", StoreOutcome::kLostRace)
      .value("FENCED", StoreOutcome::kFenced)
      .value("REFUSED", StoreOutcome::kRefused);

  py::class_<BlockKey>(m, "BlockKey")
      .def(py::init<>())
      .def(py::init([](uint64_t hi, uint64_t lo) {
             return BlockKey{hi, lo};
           }),
           py::arg("hi"), py::arg("lo"))
      .def_readwrite("hi", &BlockKey::hi)
      .def_readwrite("lo", &BlockKey::lo)
      .def_static("from_bytes",
                  [](const py::bytes& b) {
                    const std::string s = b;
                    if (s.size() < 16)
                      Raise(Status::InvalidArgument("a block key needs at least 16 bytes"));
                    return BlockKey::FromBytes(reinterpret_cast<const uint8_t*>(s.data()),
                                               s.size());
                  })
      .def_static("from_hex",
                  [](const std::string& hex) {
                    BlockKey k;
                    Raise(BlockKey::FromHex(hex, &k));
                    return k;
                  })
      .def_static("from_id", &BlockKey::FromId)
      .def("hex", &BlockKey::ToHex)
      .def("__eq__", [](const BlockKey& a, const BlockKey& b) { return a == b; })
      .def("__hash__", [](const BlockKey& k) { return py::hash(py::make_tuple(k.hi, k.lo)); })
      .def("__repr__", [](const BlockKey& k) { return "BlockKey(" + k.ToHex() + ")"; });

  py::class_<NamespaceDesc>(m, "NamespaceDesc")
      .def(py::init([](std::string model, std::string dtype, std::string kv_layout,
                       uint32_t tp_rank, uint32_t kv_group) {
             return NamespaceDesc{std::move(model), std::move(dtype), std::move(kv_layout), tp_rank,
                                  kv_group};
           }),
           py::arg("model"), py::arg("dtype"), py::arg("kv_layout"), py::arg("tp_rank") = 0,
           py::arg("kv_group") = 0)
      .def_readwrite("model", &NamespaceDesc::model)
      .def_readwrite("dtype", &NamespaceDesc::dtype)
      .def_readwrite("kv_layout", &NamespaceDesc::kv_layout)
      .def_readwrite("tp_rank", &NamespaceDesc::tp_rank)
      .def_readwrite("kv_group", &NamespaceDesc::kv_group)
      .def("__repr__", &NamespaceDesc::ToString);

  py::class_<RegionConfig>(m, "RegionConfig")
      .def(py::init<>())
      .def_readwrite("slot_size", &RegionConfig::slot_size)
      .def_readwrite("hash_algorithm", &RegionConfig::hash_algorithm)
      .def_readwrite("hash_seed_fingerprint", &RegionConfig::hash_seed_fingerprint)
      .def_readwrite("coherence", &RegionConfig::coherence)
      .def_readwrite("max_participants", &RegionConfig::max_participants)
      .def_readwrite("software_partitions", &RegionConfig::software_partitions)
      .def_readwrite("metadata_json", &RegionConfig::metadata_json);

  py::class_<RegionOptions>(m, "RegionOptions")
      .def(py::init<>())
      .def_readwrite("offset", &RegionOptions::offset)
      .def_readwrite("size", &RegionOptions::size)
      .def_readwrite("create_if_missing", &RegionOptions::create_if_missing)
      .def_readwrite("config", &RegionOptions::config)
      .def_readwrite("register_participant", &RegionOptions::register_participant)
      .def_readwrite("software_partition", &RegionOptions::software_partition)
      .def_readwrite("heartbeat_interval_ns", &RegionOptions::heartbeat_interval_ns)
      .def_readwrite("liveness_timeout_ns", &RegionOptions::liveness_timeout_ns)
      .def_readwrite("format_wait_ns", &RegionOptions::format_wait_ns)
      .def_readwrite("format_stall_ns", &RegionOptions::format_stall_ns)
      .def_readwrite("sysfs_root", &RegionOptions::sysfs_root)
      .def_readwrite("prefault", &RegionOptions::prefault);

  py::class_<RegionInfo>(m, "RegionInfo")
      .def_readonly("path", &RegionInfo::path)
      .def_readonly("backend", &RegionInfo::backend)
      .def_readonly("offset", &RegionInfo::offset)
      .def_readonly("size", &RegionInfo::size)
      .def_readonly("layout_version", &RegionInfo::layout_version)
      .def_readonly("slot_size", &RegionInfo::slot_size)
      .def_readonly("slot_stride", &RegionInfo::slot_stride)
      .def_readonly("num_slots", &RegionInfo::num_slots)
      .def_readonly("num_entries", &RegionInfo::num_entries)
      .def_readonly("num_sets", &RegionInfo::num_sets)
      .def_readonly("ways", &RegionInfo::ways)
      .def_readonly("data_offset", &RegionInfo::data_offset)
      .def_readonly("config", &RegionInfo::config)
      .def_readonly("format_epoch", &RegionInfo::format_epoch)
      .def_readonly("participant", &RegionInfo::participant);

  py::class_<PinSet>(m, "PinSet").def("__len__", &PinSet::size).def("release", &PinSet::Release);

  py::class_<Region>(m, "Region")
      .def_static(
          "open",
          [](const std::string& path, RegionOptions o,
             std::optional<uint64_t> heartbeat_interval_ns,
             std::optional<uint64_t> liveness_timeout_ns) {
            if (heartbeat_interval_ns) o.heartbeat_interval_ns = *heartbeat_interval_ns;
            if (liveness_timeout_ns) o.liveness_timeout_ns = *liveness_timeout_ns;
            std::unique_ptr<Region> r;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = Region::Open(path, o, &r);
            }
            Raise(s);
            return r;
          },
          py::arg("path"), py::arg("options"), py::kw_only(),
          py::arg("heartbeat_interval_ns") = py::none(),
          py::arg("liveness_timeout_ns") = py::none())
      .def("info", &Region::info, py::return_value_policy::reference_internal)
      .def("register_namespace",
           [](Region& r, const NamespaceDesc& d) {
             NamespaceId id = 0;
             Raise(r.RegisterNamespace(d, &id));
             return id;
           })
      .def(
          "store",
          [](Region& r, NamespaceId ns, const BlockKey& key, const py::buffer& data,
             uint32_t depth) {
            py::buffer_info b = Bytes(data, false);
            StoreOutcome out = StoreOutcome::kStored;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = r.Store(ns, key, b.ptr, static_cast<size_t>(b.size * b.itemsize), &out, depth);
            }
            Raise(s);
            return out;
          },
          py::arg("ns"), py::arg("key"), py::arg("data"), py::arg("depth") = 0,
          "Stores one block. depth: its position in its prefix chain (0 = head), an eviction "
          "hint: a chain's chunks leave tail first.")
      .def(
          "load",
          [](Region& r, NamespaceId ns, const BlockKey& key, const py::buffer& dst,
             bool verify_crc) {
            py::buffer_info b = Bytes(dst, true);
            LoadOptions lo;
            lo.verify_crc = verify_crc;
            LoadInfo li;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = r.Load(ns, key, b.ptr, static_cast<size_t>(b.size * b.itemsize), lo, &li);
            }
            Raise(s);
            return li.len;
          },
          py::arg("ns"), py::arg("key"), py::arg("dst"), py::arg("verify_crc") = true)
      .def("lookup",
           [](Region& r, NamespaceId ns, const BlockKey& key) {
             Status s = r.Lookup(ns, key);
             if (s.IsNotFound()) return false;
             Raise(s);
             return true;
           })
      .def("lookup_prefix",
           [](Region& r, NamespaceId ns, const std::vector<BlockKey>& keys) {
             return r.LookupPrefix(ns, keys.data(), keys.size());
           })
      .def(
          "pin_prefix",
          [](Region& r, NamespaceId ns, const std::vector<BlockKey>& keys) {
            auto pins = std::make_unique<PinSet>();
            Raise(r.PinPrefix(ns, keys.data(), keys.size(), pins.get()));
            return pins;
          },
          py::keep_alive<0, 1>())
      .def("drop", [](Region& r, NamespaceId ns, const BlockKey& key) { Raise(r.Drop(ns, key)); })
      .def(
          "verify",
          [](Region& r, bool drop_corrupt) {
            Region::ScrubReport rep;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = r.Verify(drop_corrupt, &rep);
            }
            Raise(s);
            py::dict d;
            d["ready"] = rep.ready;
            d["verified"] = rep.verified;
            d["crc_failures"] = rep.crc_failures;
            d["dropped"] = rep.dropped;
            d["skipped_changed"] = rep.skipped_changed;
            d["ready_off_data"] = rep.ready_off_data;
            d["data_unsettled"] = rep.data_unsettled;
            d["data_settled"] = rep.data_settled;
            return d;
          },
          py::arg("drop_corrupt") = false)
      .def("wipe",
           [](Region& r) {
             Region::WipeReport rep;
             Status s;
             {
               py::gil_scoped_release nogil;
               s = r.Wipe(&rep);
             }
             Raise(s);
             py::dict d;
             d["dropped"] = rep.dropped;
             d["pinned"] = rep.pinned;
             d["writing"] = rep.writing;
             d["orphaned"] = rep.orphaned;
             return d;
           })
      .def("process_counters", [](Region& r) { return CountersDict(r.ProcessCounters()); })
      .def("region_counters", [](Region& r) { return CountersDict(r.RegionCounters()); })
      .def("reap_dead_participants", &Region::ReapDeadParticipants);

  // Lifecycle (include/cxlkv/lifecycle.h): keyword arguments are the fields
  // of LifecycleOptions.
  auto lifecycle = [](uint64_t offset, uint64_t size, uint64_t liveness_timeout_ns) {
    LifecycleOptions o;
    o.offset = offset;
    o.size = size;
    o.liveness_timeout_ns = liveness_timeout_ns;
    return o;
  };
  m.def(
      "check_attached",
      [lifecycle](const std::string& path, uint64_t offset, uint64_t size, uint64_t liveness) {
        AttachReport rep;
        Status s;
        {
          py::gil_scoped_release nogil;
          s = CheckAttached(path, lifecycle(offset, size, liveness), &rep);
        }
        Raise(s);
        py::list pids;
        for (const auto& p : rep.live) pids.append(p.pid);
        py::dict d;
        d["attached"] = rep.attached;
        d["locked_on_this_host"] = rep.locked_on_this_host;
        d["live_pids"] = pids;
        d["watched_ns"] = rep.watched_ns;
        d["reason"] = rep.ToString();
        return d;
      },
      py::arg("path"), py::kw_only(), py::arg("offset") = 0, py::arg("size") = 0,
      py::arg("liveness_timeout_ns") = LifecycleOptions{}.liveness_timeout_ns);
  for (const char* name : {"destroy_region", "unformat_region"}) {
    const bool destroy = std::string(name) == "destroy_region";
    m.def(
        name,
        [lifecycle, destroy](const std::string& path, uint64_t offset, uint64_t size,
                             uint64_t liveness) {
          Status s;
          {
            py::gil_scoped_release nogil;
            const LifecycleOptions o = lifecycle(offset, size, liveness);
            s = destroy ? DestroyRegion(path, o) : UnformatRegion(path, o);
          }
          Raise(s);
        },
        py::arg("path"), py::kw_only(), py::arg("offset") = 0, py::arg("size") = 0,
        py::arg("liveness_timeout_ns") = LifecycleOptions{}.liveness_timeout_ns);
  }
  // ScanSlots: one (slot, state name, generation, owner, ns, len, key, depth, data)
  // tuple per slot of [first, first + count); the fields are untrusted region
  // bytes.
  m.def(
      "scan_slots",
      [](const Region& r, uint64_t first, uint64_t count) {
        std::vector<SlotView> views;
        Raise(ScanSlots(r, first, count, &views));
        py::list out;
        for (const SlotView& v : views)
          out.append(py::make_tuple(v.slot, SlotStateName(v.state), v.generation, v.owner, v.ns,
                                    v.len, v.key, v.depth, v.data));
        return out;
      },
      py::arg("region"), py::arg("first"), py::arg("count"));

#if defined(CXLKV_WITH_CUDA)
  py::enum_<GpuPath>(m, "GpuPath")
      .value("DIRECT", GpuPath::kDirect)
      .value("STAGED", GpuPath::kStaged);

  py::class_<KvTensor>(m, "KvTensor")
      .def(py::init([](uint64_t base, uint64_t stride, uint64_t block_bytes, uint64_t num_blocks) {
             return KvTensor{base, stride, block_bytes, num_blocks};
           }),
           py::arg("base"), py::arg("stride"), py::arg("block_bytes"), py::arg("num_blocks"))
      .def_readonly("base", &KvTensor::base)
      .def_readonly("stride", &KvTensor::stride)
      .def_readonly("block_bytes", &KvTensor::block_bytes)
      .def_readonly("num_blocks", &KvTensor::num_blocks);
  py::enum_<GpuCopyMethod>(m, "GpuCopyMethod")
      .value("AUTO", GpuCopyMethod::kAuto)
      .value("DMA", GpuCopyMethod::kDma)
      .value("SM", GpuCopyMethod::kSm);
  py::class_<RegionGpuOptions>(m, "RegionGpuOptions")
      .def(py::init<>())
      .def_property(
          "device", [](const RegionGpuOptions& o) { return o.transfer.device; },
          [](RegionGpuOptions& o, int v) { o.transfer.device = v; })
      .def_property(
          "registration_segment_bytes",
          [](const RegionGpuOptions& o) { return o.transfer.registration_segment_bytes; },
          [](RegionGpuOptions& o, uint64_t v) { o.transfer.registration_segment_bytes = v; })
      .def_property(
          "staging_bytes", [](const RegionGpuOptions& o) { return o.transfer.staging_bytes; },
          [](RegionGpuOptions& o, uint64_t v) { o.transfer.staging_bytes = v; })
      .def_property(
          "batch_api", [](const RegionGpuOptions& o) { return o.transfer.batch_api; },
          [](RegionGpuOptions& o, bool v) { o.transfer.batch_api = v; })
      .def_property(
          "pipeline_bytes", [](const RegionGpuOptions& o) { return o.transfer.pipeline_bytes; },
          [](RegionGpuOptions& o, uint64_t v) { o.transfer.pipeline_bytes = v; })
      .def_property(
          "copy_method", [](const RegionGpuOptions& o) { return o.transfer.copy_method; },
          [](RegionGpuOptions& o, GpuCopyMethod v) { o.transfer.copy_method = v; })
      .def_readwrite("fallback_to_staged", &RegionGpuOptions::fallback_to_staged)
      .def_readwrite("gpu_crc", &RegionGpuOptions::gpu_crc);

  // store/load take the device pieces as flat lists: block b is pieces
  // first_piece[b] .. first_piece[b+1]-1 of (ptr, length).
  py::class_<RegionGpu>(m, "RegionGpu")
      .def_static(
          "open",
          [](Region& region, const RegionGpuOptions& o) {
            std::unique_ptr<RegionGpu> g;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = RegionGpu::Open(&region, o, &g);
            }
            Raise(s);
            return g;
          },
          py::arg("region"), py::arg("options"), py::keep_alive<0, 1>())
      .def_property_readonly("direct", &RegionGpu::direct)
      .def_property_readonly("registered_segments",
                             [](const RegionGpu& g) { return g.engine()->RegisteredSegments(); })
      .def(
          "store",
          [](RegionGpu& g, NamespaceId ns, const std::vector<BlockKey>& keys,
             const std::vector<uint64_t>& ptr, const std::vector<uint64_t>& len,
             const std::vector<uint32_t>& first_piece, GpuPath path, uintptr_t after_stream,
             const std::vector<uint32_t>& depths) {
            if (first_piece.size() != keys.size() + 1 || ptr.size() != len.size() ||
                first_piece.back() != ptr.size())
              Raise(Status::InvalidArgument("store: keys, pieces and first_piece do not agree"));
            CheckDepths(depths, keys.size());
            GpuStoreResult res;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = g.Store(ns, keys.data(),
                          GpuBlocks{ptr.data(), len.data(), first_piece.data(), keys.size()}, path,
                          after_stream, &res, depths.empty() ? nullptr : depths.data());
            }
            Raise(s);
            py::list st, out;
            for (size_t i = 0; i < keys.size(); ++i) {
              st.append(StatusTuple(res.status[i]));
              out.append(res.outcome[i]);
            }
            return py::make_tuple(res.stored, st, out);
          },
          py::arg("ns"), py::arg("keys"), py::arg("ptr"), py::arg("len"), py::arg("first_piece"),
          py::arg("path") = GpuPath::kDirect, py::arg("after_stream") = 0,
          py::arg("depths") = std::vector<uint32_t>{})
      .def(
          "load",
          [](RegionGpu& g, NamespaceId ns, const std::vector<BlockKey>& keys,
             const std::vector<uint64_t>& ptr, const std::vector<uint64_t>& len,
             const std::vector<uint32_t>& first_piece, GpuPath path, bool verify_crc) {
            if (first_piece.size() != keys.size() + 1 || ptr.size() != len.size() ||
                first_piece.back() != ptr.size())
              Raise(Status::InvalidArgument("load: keys, pieces and first_piece do not agree"));
            GpuLoadResult res;
            LoadOptions lo;
            lo.verify_crc = verify_crc;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = g.Load(ns, keys.data(),
                         GpuBlocks{ptr.data(), len.data(), first_piece.data(), keys.size()}, path,
                         &res, lo);
            }
            Raise(s);
            py::list st;
            for (size_t i = 0; i < keys.size(); ++i) st.append(StatusTuple(res.status[i]));
            return py::make_tuple(res.loaded, res.prefix, st, res.len);
          },
          py::arg("ns"), py::arg("keys"), py::arg("ptr"), py::arg("len"), py::arg("first_piece"),
          py::arg("path") = GpuPath::kDirect, py::arg("verify_crc") = true)
      // The same over KV tensors: the piece list is built here (KvPieces),
      // from one (base, stride, block_bytes, num_blocks) per tensor.
      .def(
          "store_layout",
          [](RegionGpu& g, NamespaceId ns, const std::vector<BlockKey>& keys,
             const std::vector<KvTensor>& tensors, const std::vector<int64_t>& ids, uint32_t bpc,
             GpuPath path, uintptr_t after_stream, const std::vector<uint32_t>& depths) {
            KvPieces p;
            Raise(p.Build(KvLayerLayout{tensors, bpc}, ids.data(), ids.size()));
            if (p.num_chunks() != keys.size())
              Raise(Status::InvalidArgument("store: " + std::to_string(keys.size()) + " keys for " +
                                            std::to_string(p.num_chunks()) + " chunks"));
            CheckDepths(depths, keys.size());
            GpuStoreResult res;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = g.Store(ns, keys.data(), p.blocks(), path, after_stream, &res,
                          depths.empty() ? nullptr : depths.data());
            }
            Raise(s);
            py::list st, out;
            for (size_t i = 0; i < keys.size(); ++i) {
              st.append(StatusTuple(res.status[i]));
              out.append(res.outcome[i]);
            }
            return py::make_tuple(res.stored, st, out);
          },
          py::arg("ns"), py::arg("keys"), py::arg("tensors"), py::arg("block_ids"),
          py::arg("blocks_per_chunk"), py::arg("path") = GpuPath::kDirect,
          py::arg("after_stream") = 0, py::arg("depths") = std::vector<uint32_t>{})
      .def(
          "load_layout",
          [](RegionGpu& g, NamespaceId ns, const std::vector<BlockKey>& keys,
             const std::vector<KvTensor>& tensors, const std::vector<int64_t>& ids, uint32_t bpc,
             GpuPath path, bool verify_crc, uint32_t skip, uint64_t scratch,
             uint64_t scratch_bytes) {
            KvPieces p;
            Raise(p.Build(KvLayerLayout{tensors, bpc}, ids.data(), ids.size(), skip, scratch,
                          scratch_bytes));
            if (p.num_chunks() != keys.size())
              Raise(Status::InvalidArgument("load: " + std::to_string(keys.size()) + " keys for " +
                                            std::to_string(p.num_chunks()) + " chunks"));
            GpuLoadResult res;
            LoadOptions lo;
            lo.verify_crc = verify_crc;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = g.Load(ns, keys.data(), p.blocks(), path, &res, lo);
            }
            Raise(s);
            py::list st;
            for (size_t i = 0; i < keys.size(); ++i) st.append(StatusTuple(res.status[i]));
            return py::make_tuple(res.loaded, res.prefix, st, res.len);
          },
          py::arg("ns"), py::arg("keys"), py::arg("tensors"), py::arg("block_ids"),
          py::arg("blocks_per_chunk"), py::arg("path") = GpuPath::kDirect,
          py::arg("verify_crc") = true, py::arg("skip") = 0, py::arg("scratch") = 0,
          py::arg("scratch_bytes") = 0)
      // Parted (delegate.h) fills and loads of GPU-resident KV: vLLM's
      // worker on a GPU. block_ids: chunks * blocks_per_chunk entries; on
      // loads -1 marks a block that goes to scratch (KvPieces::BuildWhole).
      .def(
          "fill_parts",
          [](RegionGpu& g,
             const std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>>& tok,
             uint32_t parts, uint64_t part_len, uint32_t part, const std::vector<KvTensor>& tensors,
             const std::vector<int64_t>& ids, uint32_t bpc, GpuPath path, uintptr_t after_stream) {
            if (bpc == 0 || ids.size() != tok.size() * bpc)
              Raise(Status::InvalidArgument("fill_parts: " + std::to_string(ids.size()) +
                                            " block ids for " + std::to_string(tok.size()) +
                                            " chunks of " + std::to_string(bpc)));
            KvPieces p;
            Raise(p.BuildWhole(KvLayerLayout{tensors, bpc}, ids.data(), tok.size()));
            std::vector<WriteToken> tokens;
            for (const auto& t : tok) tokens.push_back(Token(t));
            GpuPartResult res;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = g.FillParts(tokens.data(), PartedLayout{parts, part_len}, part, p.blocks(), path,
                              after_stream, &res);
            }
            Raise(s);
            py::list st;
            for (const Status& x : res.status) st.append(StatusTuple(x));
            return py::make_tuple(res.ok, st, res.len);
          },
          py::arg("tokens"), py::arg("parts"), py::arg("part_len"), py::arg("part"),
          py::arg("tensors"), py::arg("block_ids"), py::arg("blocks_per_chunk"),
          py::arg("path") = GpuPath::kDirect, py::arg("after_stream") = 0)
      .def(
          "load_parts",
          [](RegionGpu& g, NamespaceId ns, const std::vector<BlockKey>& keys, uint32_t parts,
             uint64_t part_len, uint32_t part, const std::vector<KvTensor>& tensors,
             const std::vector<int64_t>& ids, uint32_t bpc, GpuPath path, uint64_t scratch,
             uint64_t scratch_bytes) {
            if (bpc == 0 || ids.size() != keys.size() * bpc)
              Raise(Status::InvalidArgument("load_parts: " + std::to_string(ids.size()) +
                                            " block ids for " + std::to_string(keys.size()) +
                                            " chunks of " + std::to_string(bpc)));
            KvPieces p;
            Raise(p.BuildWhole(KvLayerLayout{tensors, bpc}, ids.data(), keys.size(), scratch,
                               scratch_bytes));
            GpuPartResult res;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = g.LoadParts(ns, keys.data(), PartedLayout{parts, part_len}, part, p.blocks(),
                              path, &res);
            }
            Raise(s);
            py::list st;
            for (const Status& x : res.status) st.append(StatusTuple(x));
            return py::make_tuple(res.ok, st, res.len, res.writer);
          },
          py::arg("ns"), py::arg("keys"), py::arg("parts"), py::arg("part_len"), py::arg("part"),
          py::arg("tensors"), py::arg("block_ids"), py::arg("blocks_per_chunk"),
          py::arg("path") = GpuPath::kDirect, py::arg("scratch") = 0, py::arg("scratch_bytes") = 0);
#endif
  // ---- Delegated, parted writes and per-part loads (cxlkv/delegate.h) ----
  py::class_<PendingWrite>(m, "WriteLease")
      .def_property_readonly("open", [](const PendingWrite& w) { return w.lease.open(); })
      .def_property_readonly("len", [](const PendingWrite& w) { return w.lease.len(); })
      .def_readonly("outcome", &PendingWrite::outcome);
  m.def(
      "begin_write",
      [](Region& r, NamespaceId ns, const BlockKey& key, size_t len, uint32_t depth) {
        auto w = std::make_unique<PendingWrite>();
        Status s = r.BeginWrite(ns, key, len, &w->lease, &w->outcome, depth);
        // Expected outcomes come back in .outcome (no lease), not as errors.
        if (s.IsNoSpace() || (s.IsBusy() && w->outcome == StoreOutcome::kLostRace)) return w;
        Raise(s);
        return w;
      },
      py::arg("region"), py::arg("ns"), py::arg("key"), py::arg("len"), py::arg("depth") = 0,
      py::keep_alive<0, 1>(),
      "Reserves a slot (delegate.h). depth: the chunk's position in its prefix chain (0 = "
      "head), as Region.store's.");
  m.def("abort_write", [](Region& r, PendingWrite& w) { r.AbortWrite(&w.lease); });
  m.def("export_write_token", [](Region& r, const PendingWrite& w) {
    WriteToken t;
    Raise(ExportWriteToken(r, w.lease, &t));
    return py::make_tuple(t.format_epoch, t.slot, t.word, t.len);
  });
  m.def(
      "commit_parted_write",
      [](Region& r, PendingWrite& w, uint32_t parts, uint64_t part_len) {
        Raise(CommitPartedWrite(&r, &w.lease, PartedLayout{parts, part_len}));
      },
      py::arg("region"), py::arg("lease"), py::arg("parts"), py::arg("part_len"));
  m.def("parted_payload_len", [](uint32_t parts, uint64_t part_len) {
    return PartedLayout{parts, part_len}.PayloadLen();
  });
  m.def(
      "fill_part",
      [](Region& r, const std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>& token, uint32_t parts,
         uint64_t part_len, uint32_t part,
         const std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>>& tensors,
         uint32_t blocks_per_chunk, const py::buffer& id_buffer) {
        const std::vector<PageTensor> pt = PageTensors(tensors);
        const BlockIds ids = Ids(id_buffer);
        const ChunkPages pages{pt.data(), pt.size(), blocks_per_chunk,
                               ids.data,  0,         static_cast<uint32_t>(ids.size)};
        Status s;
        {
          py::gil_scoped_release nogil;
          s = FillPart(&r, Token(token), PartedLayout{parts, part_len}, part, pages);
        }
        Raise(s);
      },
      py::arg("region"), py::arg("token"), py::arg("parts"), py::arg("part_len"), py::arg("part"),
      py::arg("tensors"), py::arg("blocks_per_chunk"), py::arg("block_ids"));
  m.def(
      "load_part",
      [](Region& r, NamespaceId ns, const BlockKey& key, uint32_t parts, uint64_t part_len,
         uint32_t part,
         const std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>>& tensors,
         uint32_t blocks_per_chunk, const py::buffer& id_buffer, uint32_t skip) {
        const std::vector<PageTensor> pt = PageTensors(tensors);
        const BlockIds ids = Ids(id_buffer);
        const ChunkPages pages{pt.data(), pt.size(), blocks_per_chunk,
                               ids.data,  skip,      static_cast<uint32_t>(ids.size)};
        LoadInfo info;
        Status s;
        {
          py::gil_scoped_release nogil;
          s = LoadPart(&r, ns, key, PartedLayout{parts, part_len}, part, pages, &info);
        }
        Raise(s);
        return py::make_tuple(info.len, info.writer_participant);
      },
      py::arg("region"), py::arg("ns"), py::arg("key"), py::arg("parts"), py::arg("part_len"),
      py::arg("part"), py::arg("tensors"), py::arg("blocks_per_chunk"), py::arg("block_ids"),
      py::arg("skip") = 0);
  m.def("crc32c_combine", &Crc32cCombine, py::arg("crc_a"), py::arg("crc_b"), py::arg("len_b"));

#if defined(CXLKV_VERSION)
  m.attr("__version__") = CXLKV_VERSION;  // the CMake project version
#else
  m.attr("__version__") = "0+unknown";
#endif
  // Whether the engine under this binding has the test-only failpoints
  // (-DCXLKV_FAILPOINTS=ON; python/tests/test_failpoints.py).
  m.attr("_FAILPOINTS_BUILT") = py::bool_(
#if defined(CXLKV_FAILPOINTS_BUILT) && CXLKV_FAILPOINTS_BUILT
      true
#else
      false
#endif
  );
  m.attr("HAVE_CUDA") = py::bool_(
#if defined(CXLKV_WITH_CUDA)
      true
#else
      false
#endif
  );
}
