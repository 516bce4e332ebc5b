// Attention of a few query rows over a KV cache on AVX-512, each row over exactly the keys it
// sees (a prefix of the cache, or listed positions: a tree node's past and ancestors).
//
// Why not torch's scaled_dot_product_attention: in bfloat16 its CPU kernel takes ~0.75 ms for
// one query over 900 keys (14 heads, Qwen2.5-Coder-0.5B), most of a decoding step; and a batched
// call over k queries rounds differently from k one-query calls. Here every (row, head) is
// computed by the same instructions in the same order whatever else is in the call or the
// thread count: a verification pass gives each row the bits of a one-token step.
//
// Per row and head: scores s_j = (q . k_j) * scale in float32, p_j = exp(s_j - max), and
// out = sum_j p_j v_j / sum_j p_j, keys taken in increasing position.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <cstdint>
#include <vector>

#include "simd.h"

namespace {
constexpr int64_t LANES = 16;
constexpr int64_t MAX_HEAD_DIM = 256;

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
  int64_t index_width;                          // 0: rows see prefixes
};

template <typename T>
void attend_one(const T* q, const T* keys, const T* values, int64_t count, const int64_t* index,
                float scale, int64_t head_dim, float* scores, T* out) {
  const int64_t vectors = head_dim / LANES;
  __m512 query[MAX_HEAD_DIM / LANES];
  for (int64_t v = 0; v < vectors; ++v) query[v] = native::load_floats(q + v * LANES);
  float top = -INFINITY;
  for (int64_t j = 0; j < count; ++j) {
    const T* key = keys + (index ? index[j] : j) * head_dim;
    __m512 dot = _mm512_mul_ps(query[0], native::load_floats(key));
    for (int64_t v = 1; v < vectors; ++v) dot = _mm512_fmadd_ps(query[v], native::load_floats(key + v * LANES), dot);
    const float s = _mm512_reduce_add_ps(dot) * scale;
    scores[j] = s;
    top = s > top ? s : top;
  }
  const __m512 shift = _mm512_set1_ps(top);
  __m512 total = _mm512_setzero_ps();
  for (int64_t j = 0; j < count; j += LANES) {
    const __mmask16 live = count - j >= LANES ? 0xFFFF : static_cast<__mmask16>((1u << (count - j)) - 1);
    const __m512 s = _mm512_maskz_loadu_ps(live, scores + j);
    const __m512 p = _mm512_maskz_mov_ps(live, exp_nonpositive(_mm512_sub_ps(s, shift)));
    _mm512_mask_storeu_ps(scores + j, live, p);
    total = _mm512_add_ps(total, p);
  }
  const float inverse = 1.0f / _mm512_reduce_add_ps(total);
  __m512 acc[MAX_HEAD_DIM / LANES];
  for (int64_t v = 0; v < vectors; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < count; ++j) {
    const T* value = values + (index ? index[j] : j) * head_dim;
    const __m512 p = _mm512_set1_ps(scores[j]);
    for (int64_t v = 0; v < vectors; ++v) acc[v] = _mm512_fmadd_ps(p, native::load_floats(value + v * LANES), acc[v]);
  }
  const __m512 norm = _mm512_set1_ps(inverse);
  for (int64_t v = 0; v < vectors; ++v) native::store_floats(out + v * LANES, _mm512_mul_ps(acc[v], norm));
}

template <typename T>
void attend_impl(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                 const torch::Tensor& lengths, const torch::Tensor& index, float scale,
                 const Shapes& shape, torch::Tensor& out) {
  const int64_t rows = q.size(0);
  const int64_t group = shape.heads / shape.kv_heads;
  const T* qp = q.data_ptr<T>();
  const T* kp = keys.data_ptr<T>();
  const T* vp = values.data_ptr<T>();
  const int64_t* lp = lengths.data_ptr<int64_t>();
  const int64_t* ip = shape.index_width ? index.data_ptr<int64_t>() : nullptr;
  int64_t longest = 0;
  for (int64_t r = 0; r < rows; ++r) longest = std::max(longest, lp[r]);
  T* op = out.data_ptr<T>();
  at::parallel_for(0, rows * shape.heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(longest + LANES));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / shape.heads, h = item % shape.heads, kv = h / group;
      const int64_t at = (r * shape.heads + h) * shape.head_dim;
      attend_one(qp + at, kp + kv * shape.key_head_stride, vp + kv * shape.value_head_stride,
                 lp[r], ip ? ip + r * shape.index_width : nullptr, scale, shape.head_dim,
                 scores.data(), op + at);
    }
  });
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
  TORCH_CHECK(head_dim % LANES == 0 && head_dim <= MAX_HEAD_DIM, "head size: a multiple of 16, <= 256");
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
  const Shapes shape{q.size(1), keys.size(0), head_dim, keys.stride(0), values.stride(0),
                     listed ? index.size(1) : 0};
  auto out = torch::empty_like(q);
  if (q.scalar_type() == torch::kBFloat16) {
    attend_impl<at::BFloat16>(q, keys, values, lengths, index, static_cast<float>(scale), shape, out);
  } else {
    TORCH_CHECK(q.scalar_type() == torch::kFloat32, "float32 or bfloat16 only");
    attend_impl<float>(q, keys, values, lengths, index, static_cast<float>(scale), shape, out);
  }
  return out;
}
