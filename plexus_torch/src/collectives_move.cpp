// The c10d operations of PlexusBackend that move data without reducing:
// broadcast, allgather, gather, scatter, all_to_all, send/recv and barrier,
// each a post on the communicator (lists of tensors packed into one buffer).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "plexus_backend.hpp"
#include "posting.hpp"
#include "tensors.hpp"

namespace plexus_torch {

using c10d::OpType;
using namespace detail;  // the helpers of tensors.hpp, posting.hpp, reductions.hpp

c10::intrusive_ptr<c10d::Work> PlexusBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "broadcast");
    const uint32_t root = CheckedRank(opts.rootRank, getSize(), "root", "broadcast");
    auto work = NewWork(OpType::BROADCAST, Described("broadcast", t), tensors);
    Flat f = AsFlat(t, "broadcast", comm_.backend_name());
    work->posted.push_back(comm_.broadcast(f.data, f.count, f.dtype, root, f.where()));
    work->keep.push_back(f.tensor);
    CopyBackLater(*work, t, f);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  return Posting([&] {
    CheckSameKind(output, input, "allgather_into_tensor");
    TORCH_CHECK(output.numel() == input.numel() * getSize(),
                "plexus allgather_into_tensor: ", "the output holds ", output.numel(),
                " elements, not size x input = ", input.numel() * getSize());
    auto work =
        NewWork(OpType::_ALLGATHER_BASE, Described("allgather_into_tensor", input), {output});
    Flat in = AsFlat(input, "allgather_into_tensor", comm_.backend_name());
    Flat out = AsFlat(output, "allgather_into_tensor", comm_.backend_name());
    work->posted.push_back(comm_.allgather(in.data, out.data, in.count, in.dtype, in.where()));
    work->keep = {in.tensor, out.tensor};
    CopyBackLater(*work, output, out);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return Posting([&] {
    TORCH_CHECK(outputs.size() == inputs.size(),
                "plexus allgather_into_tensor_coalesced: ", outputs.size(), " outputs for ",
                inputs.size(), " inputs");
    TORCH_CHECK(!inputs.empty(), "plexus allgather_into_tensor_coalesced: no tensors");
    auto work = NewWork(OpType::COALESCED, Described("allgather_into_tensor_coalesced", inputs[0]),
                        outputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      Absorb(*work, _allgather_base(outputs[i], inputs[i], Part(opts)));
    }
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return Posting([&] {
    const at::Tensor& in = OneTensor(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == getSize(),
                "plexus allgather: one list of size() output tensors");
    for (const auto& o : outputs[0]) {
      CheckSameKind(o, in, "allgather");
      TORCH_CHECK(o.numel() == in.numel(), "plexus allgather: an output of ", o.numel(),
                  " elements for an input of ", in.numel());
    }
    auto work = NewWork(OpType::ALLGATHER, Described("allgather", in), outputs[0]);
    Flat f = AsFlat(in, "allgather", comm_.backend_name());
    at::Tensor gathered = at::empty({int64_t(getSize()) * in.numel()}, in.options());
    work->posted.push_back(
        comm_.allgather(f.data, gathered.data_ptr(), f.count, f.dtype, f.where()));
    work->keep = {f.tensor, gathered};
    work->finishers.push_back([gathered, outs = outputs[0]]() mutable { Unpack(gathered, outs); });
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return Posting([&] {
    TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
                "plexus allgather_coalesced: one output list per input");
    std::vector<at::Tensor> all_outputs;
    for (const auto& l : outputs) all_outputs.insert(all_outputs.end(), l.begin(), l.end());
    auto work = NewWork(OpType::ALLGATHER_COALESCED, Described("allgather_coalesced", inputs[0]),
                        all_outputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<std::vector<at::Tensor>> o{outputs[i]};
      std::vector<at::Tensor> in{inputs[i]};
      Absorb(*work, allgather(o, in, Part(opts)));
    }
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  return Posting([&] {
    const at::Tensor& in = OneTensor(inputs, "gather");
    const uint32_t root = CheckedRank(opts.rootRank, getSize(), "root", "gather");
    const bool is_root = getRank() == int(root);
    if (is_root) {
      TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == getSize(),
                  "plexus gather: the root needs one list of size() output tensors");
      for (const auto& o : outputs[0]) {
        CheckSameKind(o, in, "gather");
        TORCH_CHECK(o.numel() == in.numel(), "plexus gather: an output of ", o.numel(),
                    " elements for an input of ", in.numel());
      }
    } else {
      TORCH_CHECK(outputs.empty() || outputs[0].empty(), "plexus gather: only the root (rank ",
                  root, ") takes output tensors");
    }
    auto work = NewWork(OpType::GATHER, Described("gather", in),
                        is_root ? outputs[0] : std::vector<at::Tensor>{});
    Flat f = AsFlat(in, "gather", comm_.backend_name());
    at::Tensor gathered;
    if (is_root) gathered = at::empty({int64_t(getSize()) * in.numel()}, in.options());
    work->posted.push_back(comm_.gather(f.data, is_root ? gathered.data_ptr() : nullptr, f.count,
                                        f.dtype, root, f.where()));
    work->keep = {f.tensor};
    if (is_root) {
      work->keep.push_back(gathered);
      work->finishers.push_back(
          [gathered, outs = outputs[0]]() mutable { Unpack(gathered, outs); });
    }
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  return Posting([&] {
    const at::Tensor& out = OneTensor(outputs, "scatter");
    const uint32_t root = CheckedRank(opts.rootRank, getSize(), "root", "scatter");
    const bool is_root = getRank() == int(root);
    at::Tensor packed;
    if (is_root) {
      TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == getSize(),
                  "plexus scatter: the root needs one list of size() input tensors");
      for (const auto& i : inputs[0]) {
        CheckSameKind(i, out, "scatter");
        TORCH_CHECK(i.numel() == out.numel(), "plexus scatter: an input of ", i.numel(),
                    " elements for an output of ", out.numel());
      }
      packed = Pack(inputs[0]);
    } else {
      TORCH_CHECK(inputs.empty() || inputs[0].empty(), "plexus scatter: only the root (rank ", root,
                  ") takes input tensors");
    }
    auto work = NewWork(OpType::SCATTER, Described("scatter", out), outputs);
    Flat f = AsFlat(out, "scatter", comm_.backend_name());
    work->posted.push_back(comm_.scatter(is_root ? packed.data_ptr() : nullptr, f.data, f.count,
                                         f.dtype, root, f.where()));
    work->keep = {f.tensor};
    if (is_root) work->keep.push_back(packed);
    CopyBackLater(*work, out, f);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  return Posting([&] {
    CheckSameKind(output, input, "all_to_all_single");
    const std::string& backend = comm_.backend_name();
    auto work = NewWork(OpType::ALLTOALL_BASE, Described("all_to_all_single", input), {output});
    Flat in = AsFlat(input, "all_to_all_single", backend);
    Flat out = AsFlat(output, "all_to_all_single", backend);
    work->keep = {in.tensor, out.tensor};
    const uint64_t n = uint64_t(getSize());
    if (output_split_sizes.empty() && input_split_sizes.empty()) {
      TORCH_CHECK(input.numel() == output.numel() && uint64_t(input.numel()) % n == 0,
                  "plexus all_to_all_single: input and output must both hold size() equal "
                  "blocks (",
                  input.numel(), " and ", output.numel(), " elements, size ", n, ")");
      work->posted.push_back(comm_.alltoall(in.data, out.data, in.count / n, in.dtype, in.where()));
    } else {
      // Split sizes count rows (dim 0); Plexus counts elements.
      auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const Flat& f,
                        const char* side) {
        std::vector<uint64_t> c(n);
        const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
        const uint64_t per_row = rows > 0 ? f.count / uint64_t(rows) : 0;
        if (splits.empty()) {
          TORCH_CHECK(rows % int64_t(n) == 0, "plexus all_to_all_single: ", side, " has ", rows,
                      " rows, not a multiple of size ", n, " (give split sizes)");
          for (auto& x : c) x = uint64_t(rows) / n * per_row;
        } else {
          TORCH_CHECK(splits.size() == n, "plexus all_to_all_single: ", splits.size(), " ", side,
                      " split sizes for ", n, " ranks");
          int64_t sum = 0;
          for (size_t j = 0; j < n; ++j) {
            TORCH_CHECK(splits[j] >= 0, "plexus all_to_all_single: a negative split size");
            sum += splits[j];
            c[j] = uint64_t(splits[j]) * per_row;
          }
          TORCH_CHECK(sum == rows, "plexus all_to_all_single: ", side, " split sizes add up ",
                      "to ", sum, ", not its ", rows, " rows");
        }
        return c;
      };
      const auto send_counts = counts(input, input_split_sizes, in, "the input");
      const auto recv_counts = counts(output, output_split_sizes, out, "the output");
      std::vector<uint64_t> sd(n), rd(n);
      std::exclusive_scan(send_counts.begin(), send_counts.end(), sd.begin(), uint64_t{0});
      std::exclusive_scan(recv_counts.begin(), recv_counts.end(), rd.begin(), uint64_t{0});
      work->posted.push_back(comm_.alltoallv(in.data, send_counts, sd, out.data, recv_counts, rd,
                                             in.dtype, in.where()));
    }
    CopyBackLater(*work, output, out);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  return Posting([&] {
    const size_t n = size_t(getSize());
    TORCH_CHECK(outputs.size() == n && inputs.size() == n,
                "plexus all_to_all: size() input and size() output tensors");
    for (size_t j = 0; j < n; ++j) {
      CheckSameKind(inputs[0], inputs[j], "all_to_all");
      CheckSameKind(inputs[0], outputs[j], "all_to_all");
    }
    const std::string& backend = comm_.backend_name();
    auto work = NewWork(OpType::ALLTOALL, Described("all_to_all", inputs[0]), outputs);
    at::Tensor packed_in = Pack(inputs);
    int64_t total_out = 0;
    for (const auto& o : outputs) total_out += o.numel();
    at::Tensor packed_out = at::empty({total_out}, outputs[0].options());
    Flat in = AsFlat(packed_in, "all_to_all", backend);
    Flat out = AsFlat(packed_out, "all_to_all", backend);
    const uint64_t mult = inputs[0].is_complex() ? 2 : 1;
    std::vector<uint64_t> sc(n), rc(n), sd(n), rd(n);
    for (size_t j = 0; j < n; ++j) {
      sc[j] = uint64_t(inputs[j].numel()) * mult;
      rc[j] = uint64_t(outputs[j].numel()) * mult;
    }
    std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), uint64_t{0});
    std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), uint64_t{0});
    work->posted.push_back(
        comm_.alltoallv(in.data, sc, sd, out.data, rc, rd, in.dtype, in.where()));
    work->keep = {in.tensor, out.tensor};
    work->finishers.push_back([packed_out, outs = outputs]() mutable { Unpack(packed_out, outs); });
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::send(std::vector<at::Tensor>& tensors, int dst,
                                                   int tag) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "send");
    TORCH_CHECK(tag == 0, "plexus send: tag ", tag, " is not supported: Plexus matches the ",
                "messages between two ranks in the order they are posted (use tag 0)");
    const uint32_t peer = CheckedRank(dst, getSize(), "destination", "send");
    auto work = NewWork(OpType::SEND, Described("send", t), tensors);
    Flat f = AsFlat(t, "send", comm_.backend_name());
    work->posted.push_back(comm_.send(f.data, f.count, f.dtype, peer, f.where()));
    work->keep = {f.tensor};
    return c10::intrusive_ptr<c10d::Work>(work);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::recv(std::vector<at::Tensor>& tensors, int src,
                                                   int tag) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "recv");
    TORCH_CHECK(tag == 0, "plexus recv: tag ", tag, " is not supported: Plexus matches the ",
                "messages between two ranks in the order they are posted (use tag 0)");
    const uint32_t peer = CheckedRank(src, getSize(), "source", "recv");
    auto work = NewWork(OpType::RECV, Described("recv", t), tensors);
    Flat f = AsFlat(t, "recv", comm_.backend_name());
    work->posted.push_back(comm_.recv(f.data, f.count, f.dtype, peer, f.where()));
    work->keep = {f.tensor};
    CopyBackLater(*work, t, f);
    return c10::intrusive_ptr<c10d::Work>(work);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false, "plexus recv without a source (recvAnysource) is not supported: the ",
              "Plexus ABI receives from a named rank only (backend ", comm_.backend_name(), ")");
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::barrier(const c10d::BarrierOptions& opts) {
  return Posting([&] {
    auto work = NewWork(OpType::BARRIER, OpLabel{"barrier", std::nullopt, 0}, {});
    work->posted.push_back(comm_.barrier());
    return Handed(work, opts);
  });
}

}  // namespace plexus_torch
