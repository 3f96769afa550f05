// The c10d operations of PlexusBackend that reduce: allreduce, reduce,
// reduce_scatter and their coalesced and tensor forms, each a post on the
// communicator plus what reductions.hpp builds of what Plexus lacks.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/abi/call.hpp"
#include "plexus_backend.hpp"
#include "posting.hpp"
#include "reductions.hpp"
#include "tensors.hpp"

namespace plexus_torch {

using c10d::OpType;
using namespace detail;  // the helpers of tensors.hpp, posting.hpp, reductions.hpp

void PlexusBackend::PostAllreduce(PlexusWork& work, const at::Tensor& t, const c10d::ReduceOp& rop,
                                  const char* name) {
  const std::string& backend = comm_.backend_name();
  const Reduction r = ReductionOf(rop, t, name, backend);
  Flat f = AsFlat(t, name, backend);
  if (r.kind == Reduction::kPremul) Premultiply(rop, f.tensor);
  if (r.kind == Reduction::kFold) {
    at::Tensor gathered = at::empty({int64_t(getSize()), t.numel()}, f.tensor.options());
    work.posted.push_back(
        comm_.allgather(f.data, gathered.data_ptr(), f.count, f.dtype, f.where()));
    work.keep.push_back(gathered);
    work.finishers.push_back([gathered, flat = f.tensor, fold = r.fold]() mutable {
      flat.view({-1}).copy_(Fold(gathered, fold));
    });
  } else {
    const plexus::ReduceOp op = r.kind == Reduction::kPremul ? plexus::ReduceOp::Sum : r.op;
    work.posted.push_back(comm_.allreduce(f.data, f.data, f.count, f.dtype, op, f.where()));
  }
  work.keep.push_back(f.tensor);
  CopyBackLater(work, t, f);
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "allreduce");
    auto work = NewWork(OpType::ALLREDUCE, Described("allreduce", t), tensors);
    PostAllreduce(*work, t, opts.reduceOp, "allreduce");
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return Posting([&] {
    TORCH_CHECK(!tensors.empty(), "plexus allreduce_coalesced: no tensors");
    for (const auto& t : tensors) CheckSameKind(tensors[0], t, "allreduce_coalesced");
    auto work =
        NewWork(OpType::ALLREDUCE_COALESCED, Described("allreduce_coalesced", tensors[0]), tensors);
    const Reduction r =
        ReductionOf(opts.reduceOp, tensors[0], "allreduce_coalesced", comm_.backend_name());
    if (r.kind != Reduction::kNative) {
      for (const auto& t : tensors) PostAllreduce(*work, t, opts.reduceOp, "allreduce_coalesced");
      return Handed(work, opts);
    }
    std::vector<const void*> sends;
    std::vector<void*> recvs;
    std::vector<uint64_t> counts;
    std::vector<Flat> flats;
    for (const auto& t : tensors) {
      flats.push_back(AsFlat(t, "allreduce_coalesced", comm_.backend_name()));
      sends.push_back(flats.back().data);
      recvs.push_back(flats.back().data);
      counts.push_back(flats.back().count);
    }
    work->posted.push_back(
        comm_.allreduce_coalesced(sends, recvs, counts, flats[0].dtype, r.op, flats[0].where()));
    for (size_t i = 0; i < tensors.size(); ++i) {
      work->keep.push_back(flats[i].tensor);
      CopyBackLater(*work, tensors[i], flats[i]);
    }
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "reduce");
    const uint32_t root = CheckedRank(opts.rootRank, getSize(), "root", "reduce");
    const std::string& backend = comm_.backend_name();
    const Reduction r = ReductionOf(opts.reduceOp, t, "reduce", backend);
    if (r.kind == Reduction::kFold) {
      // Every rank folds; only the root's result is kept, as reduce promises.
      auto work = NewWork(OpType::REDUCE, Described("reduce", t), tensors);
      if (getRank() == int(root)) {
        PostAllreduce(*work, t, opts.reduceOp, "reduce");
      } else {
        at::Tensor scratch = t.clone();
        PostAllreduce(*work, scratch, opts.reduceOp, "reduce");
      }
      return Handed(work, opts);
    }
    auto work = NewWork(OpType::REDUCE, Described("reduce", t), tensors);
    Flat f = AsFlat(t, "reduce", backend);
    if (r.kind == Reduction::kPremul) Premultiply(opts.reduceOp, f.tensor);
    const plexus::ReduceOp op = r.kind == Reduction::kPremul ? plexus::ReduceOp::Sum : r.op;
    work->posted.push_back(comm_.reduce(f.data, f.data, f.count, f.dtype, op, root, f.where()));
    work->keep.push_back(f.tensor);
    if (getRank() == int(root)) CopyBackLater(*work, t, f);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return Posting([&] {
    CheckSameKind(output, input, "reduce_scatter_tensor");
    TORCH_CHECK(input.numel() == output.numel() * getSize(),
                "plexus reduce_scatter_tensor: ", "the input holds ", input.numel(),
                " elements, not size x output = ", output.numel() * getSize());
    const std::string& backend = comm_.backend_name();
    const Reduction r = ReductionOf(opts.reduceOp, input, "reduce_scatter_tensor", backend);
    auto work =
        NewWork(OpType::_REDUCE_SCATTER_BASE, Described("reduce_scatter_tensor", output), {output});
    Flat out = AsFlat(output, "reduce_scatter_tensor", backend);
    if (r.kind == Reduction::kFold) {
      at::Tensor gathered = at::empty({int64_t(getSize()), input.numel()}, input.options());
      Flat in = AsFlat(input, "reduce_scatter_tensor", backend);
      work->posted.push_back(
          comm_.allgather(in.data, gathered.data_ptr(), in.count, in.dtype, in.where()));
      const int64_t n = output.numel(), at = int64_t(getRank()) * n;
      work->finishers.push_back([gathered, dst = out.tensor, n, at, fold = r.fold]() mutable {
        dst.view({-1}).copy_(Fold(gathered.narrow(1, at, n), fold));
      });
      work->keep = {in.tensor, gathered, out.tensor};
    } else {
      // PREMUL_SUM scales a copy: the input is not the caller's output.
      Flat in = AsFlat(r.kind == Reduction::kPremul ? input.clone() : input,
                       "reduce_scatter_tensor", backend);
      if (r.kind == Reduction::kPremul) Premultiply(opts.reduceOp, in.tensor);
      const plexus::ReduceOp op = r.kind == Reduction::kPremul ? plexus::ReduceOp::Sum : r.op;
      work->posted.push_back(
          comm_.reduce_scatter(in.data, out.data, out.count, out.dtype, op, out.where()));
      work->keep = {in.tensor, out.tensor};
    }
    CopyBackLater(*work, output, out);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return Posting([&] {
    at::Tensor& out = const_cast<at::Tensor&>(OneTensor(outputs, "reduce_scatter"));
    TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == getSize(),
                "plexus reduce_scatter: one list of size() input tensors");
    bool even = true;
    for (const auto& i : inputs[0]) {
      CheckSameKind(i, out, "reduce_scatter");
      even = even && i.numel() == out.numel();
    }
    at::Tensor packed = Pack(inputs[0]);
    if (even) {
      auto work =
          c10::static_intrusive_pointer_cast<PlexusWork>(_reduce_scatter_base(out, packed, opts));
      work->keep.push_back(packed);
      return Handed(work, opts);
    }
    // Blocks of different sizes (torch's list form allows them): reduce_scatterv.
    const int rank = getRank();
    TORCH_CHECK(inputs[0][rank].numel() == out.numel(), "plexus reduce_scatter: input ", rank,
                " (this rank's block) holds ", inputs[0][rank].numel(), " elements, the output ",
                out.numel());
    std::vector<uint64_t> counts, displs;
    for (const auto& i : inputs[0]) {
      displs.push_back(counts.empty() ? 0 : displs.back() + counts.back());
      counts.push_back(uint64_t(i.numel()));
    }
    const std::string& backend = comm_.backend_name();
    const Reduction r = ReductionOf(opts.reduceOp, packed, "reduce_scatter", backend);
    auto work = NewWork(OpType::REDUCE_SCATTER, Described("reduce_scatter", out), {out});
    Flat o = AsFlat(out, "reduce_scatter", backend);
    Flat in = AsFlat(packed, "reduce_scatter", backend);
    if (r.kind == Reduction::kFold) {
      // Every rank's packed input has the same length: an allgather.
      at::Tensor gathered = at::empty({int64_t(getSize()), packed.numel()}, packed.options());
      work->posted.push_back(
          comm_.allgather(in.data, gathered.data_ptr(), in.count, in.dtype, in.where()));
      work->finishers.push_back([gathered, dst = o.tensor, n = int64_t(counts[rank]),
                                 at = int64_t(displs[rank]), fold = r.fold]() mutable {
        dst.view({-1}).copy_(Fold(gathered.narrow(1, at, n), fold));
      });
      work->keep = {in.tensor, gathered, o.tensor};
    } else {
      if (r.kind == Reduction::kPremul) Premultiply(opts.reduceOp, in.tensor);  // our own copy
      const plexus::ReduceOp op = r.kind == Reduction::kPremul ? plexus::ReduceOp::Sum : r.op;
      plexus::abi::Call call{PLEXUS_COLL_REDUCE_SCATTERV,
                             in.data,
                             o.data,
                             o.count,
                             static_cast<plexus_dtype_t>(o.dtype),
                             static_cast<plexus_reduce_op_t>(op),
                             0,
                             o.where()};
      // In Plexus elements: a complex tensor is carried as twice as many reals.
      const uint64_t per = packed.numel() ? in.count / uint64_t(packed.numel()) : 1;
      for (size_t j = 0; j < counts.size(); ++j) {
        counts[j] *= per;
        displs[j] *= per;
      }
      call.sendcounts = counts.data();
      call.sdispls = displs.data();
      work->posted.push_back(comm_.Post(call));
      work->keep = {in.tensor, o.tensor};
    }
    CopyBackLater(*work, out, o);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return Posting([&] {
    TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
                "plexus reduce_scatter_tensor_coalesced: one output per input");
    auto work = NewWork(OpType::COALESCED, Described("reduce_scatter_tensor_coalesced", inputs[0]),
                        outputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      Absorb(*work, _reduce_scatter_base(outputs[i], inputs[i], Part(opts)));
    }
    return Handed(work, opts);
  });
}

double PlexusBackend::RawAllreduceSeconds(const at::Tensor& t, int calls) {
  TORCH_CHECK(t.is_contiguous() && t.is_cpu(), "a contiguous cpu tensor");
  return Posting([&] {
    Flat f = AsFlat(t, "allreduce", comm_.backend_name());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      comm_.allreduce(f.data, f.data, f.count, f.dtype, plexus::ReduceOp::Sum).wait();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
}

}  // namespace plexus_torch
