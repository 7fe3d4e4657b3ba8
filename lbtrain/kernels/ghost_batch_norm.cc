// Ghost batch normalization on CPU: a group's statistics, its normalization and its gradient,
// each group's samples read while they are in the core's cache (see lbtrain/ops/__init__.py).
//
// Outputs the biased variance; the gradient recomputes 1 / sqrt(var + epsilon) from it.
//
// Layout [b, G, S, C]: group g holds the b blocks x[i, g] (i < b), each S positions by C
// channels, contiguous. Per group and channel, with n = b * S:
//   mean = sum(x) / n, var = sum((x - mean)^2) / n, inverse = 1 / sqrt(var + epsilon),
//   y = (x - mean) * scale * inverse + offset.
// Gradient (Ioffe and Szegedy 2015, sec. 3):
//   dx = scale * inverse * (dy - sum(dy) / n - (x - mean) * inverse^2 * sum(dy * (x - mean)) / n),
//   d_scale = sum over groups of sum(dy * (x - mean)) * inverse, d_offset = sum over groups of sum(dy).

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace lbtrain {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("LbtrainGhostBatchNorm")
    .Input("x: float")
    .Input("scale: float")
    .Input("offset: float")
    .Output("y: float")
    .Output("mean: float")
    .Output("variance: float")
    .Attr("epsilon: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      c->set_output(0, x);
      ShapeHandle statistics = c->Matrix(c->Dim(x, 1), c->Dim(x, 3));
      c->set_output(1, statistics);
      c->set_output(2, statistics);
      return Status();
    });

REGISTER_OP("LbtrainGhostBatchNormGrad")
    .Input("dy: float")
    .Input("x: float")
    .Input("scale: float")
    .Input("mean: float")
    .Input("variance: float")
    .Output("dx: float")
    .Output("d_scale: float")
    .Output("d_offset: float")
    .Attr("epsilon: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &x));
      c->set_output(0, x);
      c->set_output(1, c->Vector(c->Dim(x, 3)));
      c->set_output(2, c->Vector(c->Dim(x, 3)));
      return Status();
    });

namespace {

struct Layout {
  int64_t b, groups, positions, channels, block;  // block = S * C, the floats of one x[i, g]
  explicit Layout(const Tensor& x)
      : b(x.dim_size(0)), groups(x.dim_size(1)), positions(x.dim_size(2)), channels(x.dim_size(3)),
        block(x.dim_size(2) * x.dim_size(3)) {}
  int64_t offset(int64_t i, int64_t g) const { return (i * groups + g) * block; }
  int64_t count() const { return b * positions; }  // n = b * S
};

// Sums run in float over at most kChunk positions at a time (the channel loop innermost and
// contiguous, so it vectorizes), and each chunk's sums are added up in double: float rounding
// never accumulates over more than kChunk terms, however large the images.
constexpr int64_t kChunk = 256;

// total[c] += sum over the block's positions of term(value, c), for channels c0 <= c < c1;
// partial is scratch indexed as total.
template <typename Term>
inline void accumulate(const float* __restrict block, int64_t size, int64_t channels, int64_t c0, int64_t c1,
                       float* __restrict partial, double* __restrict total, Term term) {
  for (int64_t start = 0; start < size; start += kChunk * channels) {
    const int64_t end = std::min(size, start + kChunk * channels);
    for (int64_t c = c0; c < c1; ++c) partial[c] = 0.0f;
    for (int64_t p = start; p < end; p += channels)
      for (int64_t c = c0; c < c1; ++c) partial[c] += term(block[p + c], c);
    for (int64_t c = c0; c < c1; ++c) total[c] += partial[c];
  }
}

// Runs work(g, c0, c1) on TensorFlow's intra-op threads for every group g and channels c0 <= c < c1:
// whole groups when there are at least as many groups as threads, else each group's channels in
// ceil(threads / G) pieces, so that the few groups of a small world still use every core.
template <typename Work>
void for_each_piece(OpKernelContext* context, const Layout& layout, int64_t passes, Work work) {
  auto* workers = context->device()->tensorflow_cpu_worker_threads();
  const int64_t threads = workers->num_threads, groups = layout.groups, channels = layout.channels;
  if (groups == 0 || channels == 0) return;
  const int64_t pieces = std::min(channels, std::max<int64_t>(1, (threads + groups - 1) / groups));
  const int64_t width = (channels + pieces - 1) / pieces;
  tensorflow::Shard(threads, workers->workers, groups * pieces, passes * layout.b * layout.block / pieces,
                    [&](int64_t first, int64_t last) {
                      for (int64_t unit = first; unit < last; ++unit) {
                        const int64_t g = unit / pieces, c0 = (unit % pieces) * width, c1 = std::min(channels, c0 + width);
                        if (c0 < c1) work(g, c0, c1);
                      }
                    });
}

class GhostBatchNormOp : public OpKernel {
 public:
  explicit GhostBatchNormOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& scale = context->input(1);
    const Tensor& offset = context->input(2);
    OP_REQUIRES(context, x.dims() == 4, tensorflow::errors::InvalidArgument("x must be [b, G, S, C]"));
    const Layout layout(x);
    const int64_t channels = layout.channels;
    OP_REQUIRES(context, scale.NumElements() == channels && offset.NumElements() == channels,
                tensorflow::errors::InvalidArgument("scale and offset must have one value per channel"));
    Tensor *y = nullptr, *mean = nullptr, *variance = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(context, context->allocate_output(1, TensorShape({layout.groups, channels}), &mean));
    OP_REQUIRES_OK(context, context->allocate_output(2, TensorShape({layout.groups, channels}), &variance));
    const float* in = x.flat<float>().data();
    const float* gamma = scale.flat<float>().data();
    const float* beta = offset.flat<float>().data();
    float* out = y->flat<float>().data();
    float* means = mean->flat<float>().data();
    float* variances = variance->flat<float>().data();
    const double n = static_cast<double>(layout.count());
    const float epsilon = epsilon_;

    for_each_piece(context, layout, 3, [&](int64_t g, int64_t c0, int64_t c1) {
      std::vector<double> sum(channels, 0.0), squares(channels, 0.0);
      std::vector<float> mu(channels), k(channels), partial(channels);
      for (int64_t i = 0; i < layout.b; ++i)
        accumulate(in + layout.offset(i, g), layout.block, channels, c0, c1, partial.data(), sum.data(), [](float value, int64_t) { return value; });
      for (int64_t c = c0; c < c1; ++c) mu[c] = static_cast<float>(sum[c] / n);
      const float* centre = mu.data();
      for (int64_t i = 0; i < layout.b; ++i) {
        accumulate(in + layout.offset(i, g), layout.block, channels, c0, c1, partial.data(), squares.data(), [centre](float value, int64_t c) {
          const float centered = value - centre[c];
          return centered * centered;
        });
      }
      for (int64_t c = c0; c < c1; ++c) {
        const float var = static_cast<float>(squares[c] / n);
        const float inv = 1.0f / std::sqrt(var + epsilon);
        means[g * channels + c] = mu[c];
        variances[g * channels + c] = var;
        k[c] = gamma[c] * inv;
      }
      // Centred before scaling, as the ops compute it: x * k - mean * k would cancel digits where
      // the mean is large against the spread.
      const float* __restrict factor = k.data();
      for (int64_t i = 0; i < layout.b; ++i) {
        const float* __restrict row = in + layout.offset(i, g);
        float* __restrict written = out + layout.offset(i, g);
        for (int64_t p = 0; p < layout.block; p += channels)
          for (int64_t c = c0; c < c1; ++c) written[p + c] = (row[p + c] - centre[c]) * factor[c] + beta[c];
      }
    });
  }

 private:
  float epsilon_;
};

class GhostBatchNormGradOp : public OpKernel {
 public:
  explicit GhostBatchNormGradOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& dy = context->input(0);
    const Tensor& x = context->input(1);
    const Tensor& scale = context->input(2);
    const Tensor& mean = context->input(3);
    const Tensor& variance = context->input(4);
    OP_REQUIRES(context, x.dims() == 4 && dy.shape() == x.shape(),
                tensorflow::errors::InvalidArgument("dy and x must both be [b, G, S, C]"));
    const Layout layout(x);
    const int64_t channels = layout.channels;
    OP_REQUIRES(context, scale.NumElements() == channels,
                tensorflow::errors::InvalidArgument("scale must have one value per channel"));
    OP_REQUIRES(context, mean.NumElements() == layout.groups * channels && variance.NumElements() == layout.groups * channels,
                tensorflow::errors::InvalidArgument("mean and variance must be [G, C]"));
    Tensor *dx = nullptr, *d_scale = nullptr, *d_offset = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(context, context->allocate_output(1, TensorShape({channels}), &d_scale));
    OP_REQUIRES_OK(context, context->allocate_output(2, TensorShape({channels}), &d_offset));
    const float* gradient = dy.flat<float>().data();
    const float* in = x.flat<float>().data();
    const float* gamma = scale.flat<float>().data();
    const float* means = mean.flat<float>().data();
    const float* variances = variance.flat<float>().data();
    float* out = dx->flat<float>().data();
    std::vector<float> inverses(layout.groups * channels);
    for (int64_t j = 0; j < layout.groups * channels; ++j) inverses[j] = 1.0f / std::sqrt(variances[j] + epsilon_);
    const double n = static_cast<double>(layout.count());
    // Per group and channel, summed over the groups once every group is done.
    std::vector<double> sums_dy(layout.groups * channels), sums_dy_centered(layout.groups * channels);

    for_each_piece(context, layout, 2, [&](int64_t g, int64_t c0, int64_t c1) {
      const float* mu = means + g * channels;
      const float* inv = inverses.data() + g * channels;
      double* sum_dy = sums_dy.data() + g * channels;
      double* sum_dy_centered = sums_dy_centered.data() + g * channels;
      for (int64_t c = c0; c < c1; ++c) sum_dy[c] = sum_dy_centered[c] = 0.0;
      std::vector<float> partial_dy(channels), partial_dy_centered(channels);
      float* __restrict a_dy = partial_dy.data();
      float* __restrict a_dy_centered = partial_dy_centered.data();
      for (int64_t i = 0; i < layout.b; ++i) {
        const float* __restrict rows_dy = gradient + layout.offset(i, g);
        const float* __restrict rows_x = in + layout.offset(i, g);
        for (int64_t start = 0; start < layout.block; start += kChunk * channels) {  // as accumulate, two sums at once
          const int64_t end = std::min(layout.block, start + kChunk * channels);
          for (int64_t c = c0; c < c1; ++c) a_dy[c] = a_dy_centered[c] = 0.0f;
          for (int64_t p = start; p < end; p += channels)
            for (int64_t c = c0; c < c1; ++c) {
              a_dy[c] += rows_dy[p + c];
              a_dy_centered[c] += rows_dy[p + c] * (rows_x[p + c] - mu[c]);
            }
          for (int64_t c = c0; c < c1; ++c) {
            sum_dy[c] += a_dy[c];
            sum_dy_centered[c] += a_dy_centered[c];
          }
        }
      }
      // dx = k * dy - k * sum_dy / n - (x - mean) * k * inverse^2 * sum_dy_centered / n
      //    = k * dy + a * (x - mean) + d, with a = -k * inverse^2 * sum_dy_centered / n and d = -k * sum_dy / n.
      std::vector<float> k(channels), a(channels), d(channels);
      for (int64_t c = c0; c < c1; ++c) {
        k[c] = gamma[c] * inv[c];
        a[c] = static_cast<float>(-k[c] * inv[c] * inv[c] * sum_dy_centered[c] / n);
        d[c] = static_cast<float>(-k[c] * sum_dy[c] / n);
      }
      const float* __restrict k_ = k.data();
      const float* __restrict a_ = a.data();
      const float* __restrict d_ = d.data();
      const float* __restrict centre = mu;
      for (int64_t i = 0; i < layout.b; ++i) {
        const float* __restrict rows_dy = gradient + layout.offset(i, g);
        const float* __restrict rows_x = in + layout.offset(i, g);
        float* __restrict written = out + layout.offset(i, g);
        for (int64_t p = 0; p < layout.block; p += channels)
          for (int64_t c = c0; c < c1; ++c) written[p + c] = k_[c] * rows_dy[p + c] + a_[c] * (rows_x[p + c] - centre[c]) + d_[c];
      }
    });
    float* scale_gradient = d_scale->flat<float>().data();
    float* offset_gradient = d_offset->flat<float>().data();
    for (int64_t c = 0; c < channels; ++c) {
      double total_scale = 0.0, total_offset = 0.0;
      for (int64_t g = 0; g < layout.groups; ++g) {
        total_scale += sums_dy_centered[g * channels + c] * inverses[g * channels + c];
        total_offset += sums_dy[g * channels + c];
      }
      scale_gradient[c] = static_cast<float>(total_scale);
      offset_gradient[c] = static_cast<float>(total_offset);
    }
  }

 private:
  float epsilon_;
};

REGISTER_KERNEL_BUILDER(Name("LbtrainGhostBatchNorm").Device(DEVICE_CPU), GhostBatchNormOp);
REGISTER_KERNEL_BUILDER(Name("LbtrainGhostBatchNormGrad").Device(DEVICE_CPU), GhostBatchNormGradOp);

}  // namespace
}  // namespace lbtrain
