#include "worker/exchange/wire_codec.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/crc32c.h"
#include "common/status_macros.h"
#include "worker/exchange/int8_codec.h"

namespace gasloc {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; this code copies floats "
              "as they lie in memory");

absl::StatusOr<uint32_t> BytesPerElement(v1::WireEncoding encoding) {
  switch (encoding) {
    case v1::WIRE_ENCODING_UNSPECIFIED:
    case v1::WIRE_ENCODING_FP32:
      return 4u;
    case v1::WIRE_ENCODING_BF16:
      return 2u;
    case v1::WIRE_ENCODING_INT8:
      return 1u;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported wire encoding ", EncodingName(encoding),
                       " (supported: FP32, BF16, INT8)"));
  }
}

absl::StatusOr<uint64_t> PayloadBytes(v1::WireEncoding encoding,
                                      uint64_t elements) {
  ASSIGN_OR_RETURN(const uint32_t bytes_per_element,
                   BytesPerElement(encoding));
  if (encoding == v1::WIRE_ENCODING_INT8) return Int8PayloadBytes(elements);
  return elements * bytes_per_element;
}

std::string EncodingName(v1::WireEncoding encoding) {
  switch (encoding) {
    case v1::WIRE_ENCODING_UNSPECIFIED:
      return "UNSPECIFIED";
    case v1::WIRE_ENCODING_FP32:
      return "FP32";
    case v1::WIRE_ENCODING_BF16:
      return "BF16";
    case v1::WIRE_ENCODING_INT8:
      return "INT8";
    default:
      return absl::StrCat("unknown(", static_cast<int>(encoding), ")");
  }
}

std::string PhaseName(v1::ExchangePhase phase) {
  switch (phase) {
    case v1::EXCHANGE_PHASE_GOSSIP:
      return "GOSSIP";
    case v1::EXCHANGE_PHASE_REDUCE_SCATTER:
      return "REDUCE_SCATTER";
    case v1::EXCHANGE_PHASE_ALL_GATHER:
      return "ALL_GATHER";
    case v1::EXCHANGE_PHASE_MODEL:
      return "MODEL";
    case v1::EXCHANGE_PHASE_OUTER_STATE:
      return "OUTER_STATE";
    case v1::EXCHANGE_PHASE_OPTIMIZER_M:
      return "OPTIMIZER_M";
    case v1::EXCHANGE_PHASE_OPTIMIZER_V:
      return "OPTIMIZER_V";
    case v1::EXCHANGE_PHASE_UNSPECIFIED:
      return "UNSPECIFIED";
    default:
      return absl::StrCat("unknown(", static_cast<int>(phase), ")");
  }
}

std::string DescribeKey(const TransferKey& key) {
  return absl::StrCat("job ", key.job_id, " round ", key.round, " ",
                      PhaseName(key.phase), " step ", key.step);
}

// --- bf16 -----------------------------------------------------------------

uint16_t FloatToBf16(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep sign, force quiet bit
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

float Bf16ToFloatReference(uint16_t bits) {
  // Decode the fields by hand: sign, 8-bit exponent, 7-bit mantissa.
  const bool negative = (bits & 0x8000u) != 0;
  const int exponent = (bits >> 7) & 0xff;
  const int mantissa = bits & 0x7f;
  double magnitude;
  if (exponent == 0xff) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), -126 - 7);
  } else {
    magnitude = std::ldexp(1.0 + mantissa / 128.0, exponent - 127);
  }
  return static_cast<float>(negative ? -magnitude : magnitude);
}

namespace {

// The value of bf16 `bits` as a double, treating an all-ones exponent with
// a zero mantissa as 2^128 (the next value after the largest finite one in
// an unbounded exponent range), which is what rounding compares against.
double Bf16ValueUnbounded(uint16_t bits) {
  const bool negative = (bits & 0x8000u) != 0;
  const int exponent = (bits >> 7) & 0xff;
  const int mantissa = bits & 0x7f;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), -126 - 7);
  } else {
    magnitude = std::ldexp(1.0 + mantissa / 128.0, exponent - 127);
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace

uint16_t FloatToBf16Reference(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  if (std::isinf(value)) return static_cast<uint16_t>(u >> 16);
  // The two candidates: truncation towards zero, and the next bf16 away
  // from zero. Pick the nearer one; on a tie, the one with an even
  // mantissa.
  const uint16_t toward_zero = static_cast<uint16_t>(u >> 16);
  const uint16_t away = static_cast<uint16_t>(toward_zero + 1);
  const double exact = static_cast<double>(value);
  if (Bf16ValueUnbounded(toward_zero) == exact) return toward_zero;
  const double d_zero = std::fabs(exact - Bf16ValueUnbounded(toward_zero));
  const double d_away = std::fabs(Bf16ValueUnbounded(away) - exact);
  if (d_zero < d_away) return toward_zero;
  if (d_away < d_zero) return away;
  return (toward_zero & 1u) == 0 ? toward_zero : away;
}

// --- payloads ---------------------------------------------------------------

absl::Status EncodePayload(std::span<const float> values,
                           v1::WireEncoding encoding, std::string* out) {
  ASSIGN_OR_RETURN(const uint32_t bytes_per_element,
                   BytesPerElement(encoding));
  if (encoding == v1::WIRE_ENCODING_INT8) return EncodeInt8(values, out);
  // Appended (no zero-filling resize first): one pass over the bytes.
  out->reserve(out->size() + values.size() * bytes_per_element);
  if (bytes_per_element == 4) {
    out->append(reinterpret_cast<const char*>(values.data()),
                values.size() * 4);
    return absl::OkStatus();
  }
  // BF16, through a local block so the conversion loop vectorises.
  const size_t n = values.size();
  const float* src = values.data();
  uint16_t block[1024];
  for (size_t begin = 0; begin < n; begin += 1024) {
    const size_t count = std::min<size_t>(1024, n - begin);
    for (size_t i = 0; i < count; ++i) block[i] = FloatToBf16(src[begin + i]);
    out->append(reinterpret_cast<const char*>(block), count * 2);
  }
  return absl::OkStatus();
}

namespace {

absl::Status NonFiniteError(uint64_t index, float value) {
  return absl::InvalidArgumentError(
      absl::StrCat("element ", index, " is not finite (", value,
                   "); non-finite values are rejected"));
}

absl::Status BadChecksum(uint64_t offset, uint32_t expected, uint32_t crc) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad checksum on chunk at offset ", offset,
                   ": header says ", expected, ", payload has ", crc));
}

// The encoding's bytes per element, once a payload of `payload_bytes` is
// checked to hold exactly `elements` of them.
absl::StatusOr<uint32_t> PayloadBytesPerElement(uint64_t payload_bytes,
                                                v1::WireEncoding encoding,
                                                size_t elements) {
  ASSIGN_OR_RETURN(const uint32_t bytes_per_element,
                   BytesPerElement(encoding));
  ASSIGN_OR_RETURN(const uint64_t expected, PayloadBytes(encoding, elements));
  if (payload_bytes != expected)
    return absl::InvalidArgumentError(absl::StrCat(
        "payload has ", payload_bytes, " bytes, expected ", expected, " (",
        elements, " elements of ", EncodingName(encoding), ")"));
  return bytes_per_element;
}

// Converts `count` elements of payload bytes `src` into `dst`; returns
// nonzero when one of them is not finite.
uint32_t DecodeBlock(const char* src, uint32_t bytes_per_element,
                     float* dst, size_t count) {
  uint32_t non_finite = 0;
  if (bytes_per_element == 4) {
    // Load, check, store: one pass (the compiler vectorises it).
    uint32_t* out = reinterpret_cast<uint32_t*>(dst);
    for (size_t i = 0; i < count; ++i) {
      uint32_t u;
      std::memcpy(&u, src + 4 * i, 4);
      out[i] = u;
      non_finite |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
    }
  } else {
    for (size_t i = 0; i < count; ++i) {
      uint16_t b;
      std::memcpy(&b, src + 2 * i, 2);
      non_finite |= static_cast<uint32_t>((b & 0x7f80u) == 0x7f80u);
      dst[i] = Bf16ToFloat(b);
    }
  }
  return non_finite;
}

}  // namespace

absl::Status DecodePayload(absl::string_view payload,
                           v1::WireEncoding encoding, std::span<float> out,
                           uint64_t first_index) {
  ASSIGN_OR_RETURN(const uint32_t bytes_per_element,
                   PayloadBytesPerElement(payload.size(), encoding,
                                          out.size()));
  if (encoding == v1::WIRE_ENCODING_INT8)
    return DecodeInt8(payload, out, first_index);  // finite by construction
  const uint32_t non_finite =
      DecodeBlock(payload.data(), bytes_per_element, out.data(), out.size());
  if (non_finite != 0) {
    for (size_t i = 0; i < out.size(); ++i)
      if (!std::isfinite(out[i])) return NonFiniteError(first_index + i, out[i]);
  }
  return absl::OkStatus();
}

absl::Status DecodeCheckedPayload(absl::string_view payload,
                                  v1::WireEncoding encoding,
                                  std::span<float> out, uint64_t first_index,
                                  uint32_t expected_crc) {
  return DecodeCheckedPayload(PayloadPieces(&payload, 1), encoding, out,
                              first_index, expected_crc);
}

absl::Status DecodeCheckedPayload(PayloadPieces payload,
                                  v1::WireEncoding encoding,
                                  std::span<float> out, uint64_t first_index,
                                  uint32_t expected_crc) {
  uint64_t payload_bytes = 0;
  for (absl::string_view piece : payload) payload_bytes += piece.size();
  ASSIGN_OR_RETURN(const uint32_t bytes_per_element,
                   PayloadBytesPerElement(payload_bytes, encoding, out.size()));
  if (encoding == v1::WIRE_ENCODING_INT8) {
    // A payload of about a byte a value: the CRC's own pass costs little,
    // and so does joining its pieces (blocks of codes span them).
    std::string joined;
    absl::string_view whole = payload.empty() ? "" : payload[0];
    if (payload.size() > 1) {
      joined = absl::StrJoin(payload, "");
      whole = joined;
    }
    const uint32_t sum = Crc32c(whole.data(), whole.size());
    if (sum != expected_crc) return BadChecksum(first_index, expected_crc, sum);
    return DecodeInt8(whole, out, first_index);
  }
  // Blocks small enough to stay in L1 between the CRC and the conversion
  // (the payload is read from memory once), whole multiples of the CRC's
  // three-stream block. An element split between two pieces goes through
  // `carry`.
  constexpr size_t kBlockBytes = 2 * kCrc32cParallelBytes;
  uint32_t sum = 0, non_finite = 0;
  float* dst = out.data();
  char carry[4];
  size_t carried = 0;
  for (absl::string_view piece : payload) {
    for (size_t pos = 0; pos < piece.size();) {
      const size_t n = std::min(kBlockBytes, piece.size() - pos);
      const char* src = piece.data() + pos;
      pos += n;
      sum = Crc32cExtend(sum, src, n);
      size_t used = 0;
      if (carried > 0) {
        used = std::min<size_t>(bytes_per_element - carried, n);
        std::memcpy(carry + carried, src, used);
        carried += used;
        if (carried < bytes_per_element) continue;
        non_finite |= DecodeBlock(carry, bytes_per_element, dst++, 1);
      }
      const size_t whole = (n - used) / bytes_per_element;
      non_finite |= DecodeBlock(src + used, bytes_per_element, dst, whole);
      dst += whole;
      used += whole * bytes_per_element;
      carried = n - used;
      std::memcpy(carry, src + used, carried);
    }
  }
  // A payload the sender did not write is reported as such, before any
  // value in it.
  if (sum != expected_crc) return BadChecksum(first_index, expected_crc, sum);
  if (non_finite != 0) {
    for (size_t i = 0; i < out.size(); ++i)
      if (!std::isfinite(out[i])) return NonFiniteError(first_index + i, out[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChunkSpan>> PlanChunks(uint64_t range_begin,
                                                  uint64_t range_end,
                                                  v1::WireEncoding encoding,
                                                  uint32_t chunk_bytes) {
  ASSIGN_OR_RETURN(const uint32_t bytes_per_element,
                   BytesPerElement(encoding));
  if (range_end < range_begin)
    return absl::InvalidArgumentError(absl::StrCat(
        "range [", range_begin, ", ", range_end, ") ends before it begins"));
  if (chunk_bytes < bytes_per_element)
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes ", chunk_bytes,
                     " is smaller than one element (", bytes_per_element,
                     " bytes)"));
  // INT8: whole blocks of kInt8BlockElements, counted from range_begin, so
  // the quantisation does not depend on chunk_bytes.
  const uint64_t per_chunk = encoding == v1::WIRE_ENCODING_INT8
                                 ? Int8ElementsPerChunk(chunk_bytes)
                                 : chunk_bytes / bytes_per_element;
  std::vector<ChunkSpan> chunks;
  if (range_begin == range_end) {
    chunks.push_back({.offset = range_begin, .length = 0});
    return chunks;
  }
  chunks.reserve((range_end - range_begin + per_chunk - 1) / per_chunk);
  for (uint64_t offset = range_begin; offset < range_end;
       offset += per_chunk) {
    chunks.push_back(
        {offset, static_cast<uint32_t>(std::min(per_chunk, range_end - offset))});
  }
  return chunks;
}

absl::Status EncodeChunk(const ChunkContext& context,
                         std::span<const float> arena, const ChunkSpan& span,
                         bool last, v1::ExchangeChunk* chunk) {
  if (arena.size() != context.arena_elements)
    return absl::InvalidArgumentError(
        absl::StrCat("arena has ", arena.size(), " elements, the context says ",
                     context.arena_elements));
  if (span.offset < context.range_begin ||
      span.offset + span.length > context.range_end ||
      context.range_end > arena.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk [", span.offset, ", ", span.offset + span.length,
        ") is not inside range [", context.range_begin, ", ",
        context.range_end, ") of an arena of ", arena.size()));
  v1::ChunkHeader* header = chunk->mutable_header();
  header->set_job_id(context.key.job_id);
  header->set_round(context.key.round);
  header->set_sender_id(context.sender_id);
  header->set_phase(context.key.phase);
  header->set_step(context.key.step);
  header->set_offset(span.offset);
  header->set_length(span.length);
  header->set_range_begin(context.range_begin);
  header->set_range_end(context.range_end);
  header->set_encoding(context.encoding);
  header->set_arena_elements(context.arena_elements);
  std::string* payload = chunk->mutable_payload();
  payload->clear();
  ASSIGN_OR_RETURN(const uint32_t bytes_per_element,
                   BytesPerElement(context.encoding));
  const std::span<const float> values = arena.subspan(span.offset, span.length);
  if (context.encoding == v1::WIRE_ENCODING_INT8) {
    // Block scales interleaved with the codes; the CRC over the whole
    // payload afterwards (a byte a value: its second pass is cheap).
    RETURN_IF_ERROR(EncodeInt8(values, payload));
    header->set_crc32c(Crc32c(payload->data(), payload->size()));
    chunk->set_last(last);
    return absl::OkStatus();
  }
  payload->reserve(static_cast<size_t>(span.length) * bytes_per_element);
  // Block by block, the CRC over each block just written (still in L1):
  // the values are read from memory once.
  const size_t per_block = 2 * kCrc32cParallelBytes / bytes_per_element;
  uint32_t crc = 0;
  for (size_t begin = 0; begin < values.size(); begin += per_block) {
    const size_t written = payload->size();
    RETURN_IF_ERROR(EncodePayload(
        values.subspan(begin, std::min(per_block, values.size() - begin)),
        context.encoding, payload));
    crc = Crc32cExtend(crc, payload->data() + written,
                       payload->size() - written);
  }
  header->set_crc32c(crc);
  chunk->set_last(last);
  return absl::OkStatus();
}

absl::Status ValidateChunkHeader(const v1::ExchangeChunk& chunk,
                                 const ChunkExpectation& expect) {
  return ValidateChunkHeader(chunk.header(), chunk.payload().size(), expect);
}

absl::Status ValidateChunkHeader(const v1::ChunkHeader& h,
                                 uint64_t payload_bytes,
                                 const ChunkExpectation& expect) {
  const TransferKey& key = expect.key;
  if (h.job_id() != key.job_id)
    return absl::FailedPreconditionError(
        absl::StrCat("chunk is for job ", h.job_id(), ", worker ",
                     expect.receiver_id, " expects job ", key.job_id));
  if (h.round() != key.round)
    return absl::FailedPreconditionError(absl::StrCat(
        "chunk is for round ", h.round(), " of job ", h.job_id(), ", worker ",
        expect.receiver_id, " is in round ", key.round));
  if (h.phase() != key.phase || h.step() != key.step)
    return absl::FailedPreconditionError(absl::StrCat(
        "chunk is for phase ", PhaseName(h.phase()), " step ", h.step(),
        ", worker ", expect.receiver_id, " expects ", PhaseName(key.phase),
        " step ", key.step));
  if (h.sender_id() != expect.sender_id)
    return absl::FailedPreconditionError(
        absl::StrCat("sender ", h.sender_id(), " is not a peer of worker ",
                     expect.receiver_id, " in round ", key.round));
  ASSIGN_OR_RETURN(const uint64_t expected_bytes,
                   PayloadBytes(h.encoding(), h.length()));
  if (h.arena_elements() != expect.arena_elements)
    return absl::InvalidArgumentError(absl::StrCat(
        "sender's arena has ", h.arena_elements(), " elements, worker ",
        expect.receiver_id, "'s has ", expect.arena_elements));
  if (h.range_begin() != expect.range_begin ||
      h.range_end() != expect.range_end)
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk announces range [", h.range_begin(), ", ", h.range_end(),
        "), expected [", expect.range_begin, ", ", expect.range_end, ")"));
  const uint64_t end = h.offset() + h.length();  // no overflow: length < 2^32
  if (h.offset() < expect.range_begin || end > expect.range_end ||
      h.offset() > expect.arena_elements || end > expect.arena_elements)
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk [", h.offset(), ", ", end, ") lies outside range [",
        expect.range_begin, ", ", expect.range_end, ") / arena of ",
        expect.arena_elements, " elements"));
  if (payload_bytes != expected_bytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "payload has ", payload_bytes, " bytes, header says ",
        h.length(), " elements of ", EncodingName(h.encoding()), " = ",
        expected_bytes, " bytes"));
  return absl::OkStatus();
}

absl::Status ValidateChunk(const v1::ExchangeChunk& chunk,
                           const ChunkExpectation& expect) {
  RETURN_IF_ERROR(ValidateChunkHeader(chunk, expect));
  const v1::ChunkHeader& h = chunk.header();
  const uint32_t crc = Crc32c(chunk.payload().data(), chunk.payload().size());
  if (crc != h.crc32c()) return BadChecksum(h.offset(), h.crc32c(), crc);
  return absl::OkStatus();
}

absl::Status DecodeChunkPayload(const v1::ExchangeChunk& chunk,
                                std::span<float> out) {
  const absl::string_view payload = chunk.payload();
  return DecodeChunkPayload(chunk.header(), PayloadPieces(&payload, 1), out);
}

absl::Status DecodeChunkPayload(const v1::ChunkHeader& header,
                                PayloadPieces payload, std::span<float> out) {
  return DecodeCheckedPayload(payload, header.encoding(), out,
                              header.offset(), header.crc32c());
}

absl::Status ValidateAndDecodeChunk(const v1::ExchangeChunk& chunk,
                                    const ChunkExpectation& expect,
                                    std::span<float> buffer) {
  if (buffer.size() != expect.arena_elements)
    return absl::InternalError(
        absl::StrCat("receive buffer has ", buffer.size(),
                     " elements, expected ", expect.arena_elements));
  RETURN_IF_ERROR(ValidateChunkHeader(chunk, expect));
  const v1::ChunkHeader& h = chunk.header();
  return DecodeChunkPayload(chunk, buffer.subspan(h.offset(), h.length()));
}

v1::ExchangeChunk MakeAck(const v1::ChunkHeader& last, uint64_t receiver_id) {
  v1::ExchangeChunk ack;
  v1::ChunkHeader* h = ack.mutable_header();
  h->set_job_id(last.job_id());
  h->set_round(last.round());
  h->set_phase(last.phase());
  h->set_step(last.step());
  h->set_sender_id(receiver_id);
  h->set_range_begin(last.range_begin());
  h->set_range_end(last.range_end());
  h->set_offset(last.range_end());
  h->set_encoding(last.encoding());
  h->set_arena_elements(last.arena_elements());
  ack.set_last(true);
  return ack;
}

absl::Status CheckAck(const v1::ExchangeChunk& ack, const TransferKey& key,
                      uint64_t receiver_id) {
  const v1::ChunkHeader& h = ack.header();
  if (ack.last() && h.job_id() == key.job_id && h.round() == key.round &&
      h.phase() == key.phase && h.step() == key.step &&
      h.sender_id() == receiver_id)
    return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "the acknowledgement of ", DescribeKey(key), " from worker ",
      receiver_id, " does not match the transfer (it names sender ",
      h.sender_id(), ", ",
      DescribeKey({h.job_id(), h.round(), h.phase(), h.step()}),
      ack.last() ? "" : ", without last", ")"));
}

}  // namespace gasloc
