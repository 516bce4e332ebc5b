// Attention of a few query rows over a KV cache on AVX-512, each row over exactly the keys it
// sees (a prefix of the cache, or listed positions: a tree node's past and ancestors).
//
// Why not torch's scaled_dot_product_attention: in bfloat16 its CPU kernel takes ~0.75 ms for
// one query over 900 keys (14 heads, Qwen2.5-Coder-0.5B), most of a decoding step; and a batched
// call over k queries rounds differently from k one-query calls. Here every (row, head) is
// computed by the same instructions in the same order whatever else is in the call or the
// thread count: a verification pass gives each row the bits of a one-token step.
//
// Per row and head: scores s_j = (q . k_j) * scale in float32 (16 keys at a time), p_j =
// exp(s_j - max), and out = sum_j p_j v_j / sum_j p_j, keys taken in increasing position.
// The queries of up to ROW_BLOCK rows on one kv head share each block of 16 keys while it is in
// cache, and up to 16 / (D / 16) of them each value vector they all see in place.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "simd.h"

namespace {
constexpr int64_t LANES = 16;
constexpr int64_t MAX_HEAD_DIM = 256;
constexpr const char* HEAD_SIZES = "16, 32, 64, 80, 96, 128, 256";  // native.ATTENTION_HEAD_SIZES

// e^x for x <= 0: x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^6
// (relative error ~1e-7), times 2^n.
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // e^-104 is below float's smallest
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

struct Shapes {
  int64_t heads, kv_heads, head_dim;
  int64_t key_head_stride, value_head_stride;  // elements between kv heads in the cache
};

// Which keys each row sees: the first lengths[r] positions, or index[r, :lengths[r]].
struct RowKeys {
  const int64_t* lengths;
  const int64_t* index;  // nullptr: prefixes
  int64_t width;
  int64_t key(int64_t r, int64_t j) const { return index ? index[r * width + j] : j; }
  int64_t end(int64_t r) const { return key(r, lengths[r] - 1) + 1; }  // past its last key
  // How many of its first keys lie at their own position (all of a prefix; a tree row's past).
  int64_t in_place(int64_t r) const {
    if (!index) return lengths[r];
    int64_t j = 0;
    while (j < lengths[r] && index[r * width + j] == j) ++j;
    return j;
  }
};

constexpr int64_t ROW_BLOCK = 8;  // rows per work item: their queries share the converted keys

// Slot s of a block of 16 dot-product vectors holds key SLOT_KEY[s]: reduce16 then leaves key
// i's score in lane i.
constexpr int SLOT_KEY[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

// 16 vectors -> one vector of their lane sums, each taken in the same association (lanes l +
// l+8, then + l+4, + l+2, + l+1, as _mm512_reduce_add_ps), whichever slot it came in.
inline __m512 reduce16(const __m512* v) {
  __m512 w[8];
  for (int i = 0; i < 8; ++i) {
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44),
                         _mm512_shuffle_f32x4(v[i], v[i + 8], 0xEE));
  }
  __m512 x[4];
  for (int i = 0; i < 4; ++i) {
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[i], w[i + 4], 0x88),
                         _mm512_shuffle_f32x4(w[i], w[i + 4], 0xDD));
  }
  __m512 y[2];
  for (int i = 0; i < 2; ++i) {
    y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[i], x[i + 2], 0x44),
                         _mm512_shuffle_ps(x[i], x[i + 2], 0xEE));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
}

inline __mmask16 live_lanes(int64_t left) {
  return left >= LANES ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
}

// Scaled scores of one query [V vectors] with the keys [block, block + 16) (those before `end`)
// into scores[block ...].
template <int V, typename T>
inline void block_scores(const __m512* query, const T* keys, int64_t block, int64_t end,
                         const __m512 scaling, float* scores) {
  __m512 dots[LANES];
#pragma GCC unroll 16
  for (int s = 0; s < LANES; ++s) {
    const int64_t t = std::min<int64_t>(block + SLOT_KEY[s], end - 1);  // past the end: unused
    const T* key = keys + t * V * LANES;
    __m512 dot = _mm512_mul_ps(query[0], native::load_floats(key));
    for (int i = 1; i < V; ++i) dot = _mm512_fmadd_ps(query[i], native::load_floats(key + i * LANES), dot);
    dots[s] = dot;
  }
  _mm512_mask_storeu_ps(scores + block, live_lanes(end - block), _mm512_mul_ps(reduce16(dots), scaling));
}

// A row's softmax weights over its keys, in their order, from its scores by position; returns
// 1 / their sum.
inline float softmax_weights(const float* scores, const RowKeys& rows, int64_t r, float* weights) {
  const int64_t count = rows.lengths[r];
  if (rows.index) {
    for (int64_t j = 0; j < count; ++j) weights[j] = scores[rows.key(r, j)];
  } else if (weights != scores) {
    std::copy(scores, scores + count, weights);
  }
  __m512 top = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < count; j += LANES) {
    top = _mm512_max_ps(top, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), live_lanes(count - j), weights + j));
  }
  const __m512 shift = _mm512_set1_ps(_mm512_reduce_max_ps(top));
  __m512 total = _mm512_setzero_ps();
  for (int64_t j = 0; j < count; j += LANES) {
    const __mmask16 live = live_lanes(count - j);
    const __m512 s = _mm512_maskz_loadu_ps(live, weights + j);
    const __m512 p = _mm512_maskz_mov_ps(live, exp_nonpositive(_mm512_sub_ps(s, shift)));
    _mm512_mask_storeu_ps(weights + j, live, p);
    total = _mm512_add_ps(total, p);
  }
  return 1.0f / _mm512_reduce_add_ps(total);
}

// Weighted sums of values for up to 16 / V queries at once: they share each value vector over
// the keys all of them see in place; each then goes on alone. A query's sum is accumulated key
// by key in its own order either way.
template <int V, typename T>
void weighted_values(int count, const int64_t* rows_of, const float* const* weights,
                     const float* inverse, const RowKeys& rows, const T* values,
                     T* const* out) {
  constexpr int BLOCK = V >= 16 ? 1 : 16 / V;
  for (int first = 0; first < count; first += BLOCK) {
    const int n = std::min(BLOCK, count - first);
    __m512 acc[BLOCK][V];
    int64_t shared = INT64_MAX;
    for (int q = 0; q < n; ++q) {
      for (int i = 0; i < V; ++i) acc[q][i] = _mm512_setzero_ps();
      shared = std::min(shared, rows.in_place(rows_of[first + q]));
    }
    for (int64_t j = 0; j < shared; ++j) {
      __m512 value[V];
      for (int i = 0; i < V; ++i) value[i] = native::load_floats(values + j * V * LANES + i * LANES);
      for (int q = 0; q < n; ++q) {
        const __m512 p = _mm512_set1_ps(weights[first + q][j]);
        for (int i = 0; i < V; ++i) acc[q][i] = _mm512_fmadd_ps(p, value[i], acc[q][i]);
      }
    }
    for (int q = 0; q < n; ++q) {
      const int64_t r = rows_of[first + q];
      for (int64_t j = shared; j < rows.lengths[r]; ++j) {
        const T* value = values + rows.key(r, j) * V * LANES;
        const __m512 p = _mm512_set1_ps(weights[first + q][j]);
        for (int i = 0; i < V; ++i) acc[q][i] = _mm512_fmadd_ps(p, native::load_floats(value + i * LANES), acc[q][i]);
      }
      const __m512 norm = _mm512_set1_ps(inverse[first + q]);
      for (int i = 0; i < V; ++i) native::store_floats(out[first + q] + i * LANES, _mm512_mul_ps(acc[q][i], norm));
    }
  }
}

// One work item: the queries (row, head) of rows [r0, r1) on kv head `kv`. Scores go key
// block by key block, every query in turn, so a block's keys are read from memory once.
template <int V, typename T>
void attend_item(const T* q, const T* keys, const T* values, const RowKeys& rows, int64_t r0,
                 int64_t r1, int64_t kv, float scale, const Shapes& shape, T* out) {
  const int64_t group = shape.heads / shape.kv_heads;
  const int count = static_cast<int>((r1 - r0) * group);
  int64_t end = 0;
  for (int64_t r = r0; r < r1; ++r) end = std::max(end, rows.end(r));
  const int64_t stride = end + LANES;  // a query's scores by position, then its weights
  // Kept per thread from call to call: fresh buffers of this size cost page faults each time.
  thread_local std::vector<float> scores, weights, queries;
  thread_local std::vector<int64_t> rows_of;
  thread_local std::vector<const float*> weight_rows;
  thread_local std::vector<float> inverse;
  thread_local std::vector<T*> outs;
  scores.resize(static_cast<size_t>(count * stride));
  queries.resize(static_cast<size_t>(count * V * LANES));
  rows_of.resize(count);
  weight_rows.resize(count);
  inverse.resize(count);
  outs.resize(count);
  for (int n = 0; n < count; ++n) {
    const int64_t r = r0 + n / group, h = kv * group + n % group;
    const int64_t at = (r * shape.heads + h) * V * LANES;
    for (int i = 0; i < V; ++i) _mm512_storeu_ps(queries.data() + (n * V + i) * LANES, native::load_floats(q + at + i * LANES));
    rows_of[n] = r;
    outs[n] = out + at;
  }
  const T* k = keys + kv * shape.key_head_stride;
  const __m512 scaling = _mm512_set1_ps(scale);
  for (int64_t block = 0; block < end; block += LANES) {
    for (int n = 0; n < count; ++n) {
      const int64_t row_end = rows.end(rows_of[n]);
      if (block >= row_end) continue;
      __m512 query[V];
      for (int i = 0; i < V; ++i) query[i] = _mm512_loadu_ps(queries.data() + (n * V + i) * LANES);
      block_scores<V, T>(query, k, block, row_end, scaling, scores.data() + n * stride);
    }
  }
  const bool listed = rows.index != nullptr;
  if (listed) weights.resize(static_cast<size_t>(count * stride));
  for (int n = 0; n < count; ++n) {
    float* own = scores.data() + n * stride;
    float* w = listed ? weights.data() + n * stride : own;  // prefixes: in place
    inverse[n] = softmax_weights(own, rows, rows_of[n], w);
    weight_rows[n] = w;
  }
  weighted_values<V, T>(count, rows_of.data(), weight_rows.data(), inverse.data(), rows,
                        values + kv * shape.value_head_stride, outs.data());
}

template <int V, typename T>
void attend_impl(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                 const RowKeys& rows, float scale, const Shapes& shape, torch::Tensor& out) {
  const int64_t row_count = q.size(0);
  const int64_t blocks = (row_count + ROW_BLOCK - 1) / ROW_BLOCK;
  const T* qp = q.data_ptr<T>();
  const T* kp = keys.data_ptr<T>();
  const T* vp = values.data_ptr<T>();
  T* op = out.data_ptr<T>();
  at::parallel_for(0, shape.kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t kv = item % shape.kv_heads, block = item / shape.kv_heads;
      const int64_t r0 = block * ROW_BLOCK, r1 = std::min(row_count, r0 + ROW_BLOCK);
      attend_item<V, T>(qp, kp, vp, rows, r0, r1, kv, scale, shape, op);
    }
  });
}

template <typename T>
void attend_dispatch(const torch::Tensor& q, const torch::Tensor& keys,
                     const torch::Tensor& values, const RowKeys& rows, float scale,
                     const Shapes& shape, torch::Tensor& out) {
  switch (shape.head_dim / LANES) {
    case 1: return attend_impl<1, T>(q, keys, values, rows, scale, shape, out);
    case 2: return attend_impl<2, T>(q, keys, values, rows, scale, shape, out);
    case 4: return attend_impl<4, T>(q, keys, values, rows, scale, shape, out);
    case 5: return attend_impl<5, T>(q, keys, values, rows, scale, shape, out);
    case 6: return attend_impl<6, T>(q, keys, values, rows, scale, shape, out);
    case 8: return attend_impl<8, T>(q, keys, values, rows, scale, shape, out);
    case 16: return attend_impl<16, T>(q, keys, values, rows, scale, shape, out);
    default: TORCH_CHECK(false, "head size ", shape.head_dim, " is not one of ", HEAD_SIZES);
  }
}
}  // namespace

// q [S, H, D]; keys / values [KVH, T, D] (rows of D contiguous; heads may be strided, as
// views of a cache with room to spare); lengths int64 [S]: how many keys row s sees; index
// int64 [S, L]: which (in increasing order), or an empty tensor: the first lengths[s].
// -> [S, H, D] in q's dtype (float32 or bfloat16, the cache's too).
torch::Tensor attend(torch::Tensor q, torch::Tensor keys, torch::Tensor values,
                     torch::Tensor lengths, torch::Tensor index, double scale) {
  TORCH_CHECK(q.dim() == 3 && keys.dim() == 3 && values.dim() == 3, "q, keys, values: 3-D");
  TORCH_CHECK(q.scalar_type() == keys.scalar_type() && q.scalar_type() == values.scalar_type(),
              "q, keys and values must share a dtype");
  const int64_t head_dim = q.size(2);
  TORCH_CHECK(head_dim % LANES == 0 && head_dim <= MAX_HEAD_DIM, "head size must be one of ", HEAD_SIZES);
  TORCH_CHECK(keys.size(2) == head_dim && values.size(2) == head_dim, "head sizes differ");
  TORCH_CHECK(keys.stride(2) == 1 && keys.stride(1) == head_dim && values.stride(2) == 1 &&
                  values.stride(1) == head_dim,
              "keys and values need contiguous rows");
  TORCH_CHECK(keys.size(0) > 0 && q.size(1) % keys.size(0) == 0, "heads must group over kv heads");
  TORCH_CHECK(lengths.scalar_type() == torch::kInt64 && lengths.numel() == q.size(0), "lengths: int64 [S]");
  const bool listed = index.numel() > 0;
  if (listed) {
    TORCH_CHECK(index.scalar_type() == torch::kInt64 && index.dim() == 2 && index.size(0) == q.size(0),
                "index: int64 [S, L]");
  }
  lengths = lengths.contiguous();
  index = index.contiguous();
  const int64_t* lp = lengths.data_ptr<int64_t>();
  for (int64_t r = 0; r < q.size(0); ++r) {
    TORCH_CHECK(lp[r] > 0 && lp[r] <= (listed ? index.size(1) : keys.size(1)), "a row sees no keys or too many");
  }
  if (listed) {
    const int64_t* ip = index.data_ptr<int64_t>();
    for (int64_t r = 0; r < q.size(0); ++r) {
      int64_t previous = -1;
      for (int64_t j = 0; j < lp[r]; ++j) {
        const int64_t at = ip[r * index.size(1) + j];
        TORCH_CHECK(at > previous && at < keys.size(1),
                    "listed keys must increase and lie inside the cache");
        previous = at;
      }
    }
  }
  q = q.contiguous();
  const Shapes shape{q.size(1), keys.size(0), head_dim, keys.stride(0), values.stride(0)};
  const RowKeys rows{lp, listed ? index.data_ptr<int64_t>() : nullptr, listed ? index.size(1) : 0};
  auto out = torch::empty_like(q);
  if (q.scalar_type() == torch::kBFloat16) {
    attend_dispatch<at::BFloat16>(q, keys, values, rows, static_cast<float>(scale), shape, out);
  } else {
    TORCH_CHECK(q.scalar_type() == torch::kFloat32, "float32 or bfloat16 only");
    attend_dispatch<float>(q, keys, values, rows, static_cast<float>(scale), shape, out);
  }
  return out;
}
