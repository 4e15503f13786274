//! The codec of the etcd services and clients: prost's, except that a
//! `TxnRequest` is read by hand. prost refuses messages nested past 100
//! levels (a txn two levels a nesting, so ~50 nested txns) as Internal;
//! a txn nested deeper than the store takes is refused here, unread, as
//! etcd refuses a txn past its op budget: "too many operations in txn
//! request" (InvalidArgument), however deep it goes.

use std::any::{Any, TypeId};
use std::marker::PhantomData;

use bytes::{Buf, Bytes};
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;

use super::pb::etcdserverpb::{request_op::Request, RequestOp, TxnRequest};
use super::status;

/// How many txns deep a request may nest before it is refused unread:
/// the store's own bound (see [`crate::command::MAX_TXN_DEPTH`]), which
/// also keeps the hand decoder's recursion shallow.
pub(crate) const MAX_TXN_DEPTH: usize = crate::command::MAX_TXN_DEPTH;

/// Generated code names it by path and builds one per call.
#[derive(Debug, Clone)]
pub(crate) struct EtcdCodec<T, U> {
    _types: PhantomData<(T, U)>,
}

impl<T, U> Default for EtcdCodec<T, U> {
    fn default() -> Self {
        EtcdCodec {
            _types: PhantomData,
        }
    }
}

impl<T, U> Codec for EtcdCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = EtcdDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        EtcdDecoder { _type: PhantomData }
    }
}

#[derive(Debug)]
pub(crate) struct EtcdDecoder<U> {
    _type: PhantomData<U>,
}

impl<U: Message + Default + 'static> Decoder for EtcdDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // The one message of the API that nests without bound; every
        // other is prost's.
        if TypeId::of::<U>() == TypeId::of::<TxnRequest>() {
            let mut decoded = Some(decode_txn_request(buf)?);
            let decoded: &mut dyn Any = &mut decoded;
            return Ok(decoded.downcast_mut::<Option<U>>().and_then(Option::take));
        }
        U::decode(buf).map(Some).map_err(malformed)
    }
}

/// A `TxnRequest` as prost would read it, at any depth up to
/// [`MAX_TXN_DEPTH`]; deeper is etcd's "too many operations".
pub(crate) fn decode_txn_request(buf: &mut impl Buf) -> Result<TxnRequest, Status> {
    // One copy up front; nested messages are then slices of it.
    let mut bytes = buf.copy_to_bytes(buf.remaining());
    decode_txn(&mut bytes, 1)
}

fn decode_txn(buf: &mut Bytes, depth: usize) -> Result<TxnRequest, Status> {
    if depth > MAX_TXN_DEPTH {
        return Err(Status::invalid_argument(status::TOO_MANY_OPS));
    }
    let mut txn = TxnRequest::default();
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(buf).map_err(malformed)?;
        match tag {
            1 => {
                let compare = length_delimited(wire_type, buf)?;
                txn.compare
                    .push(Message::decode(compare).map_err(malformed)?);
            }
            2 => {
                let mut op = length_delimited(wire_type, buf)?;
                txn.success.push(decode_op(&mut op, depth)?);
            }
            3 => {
                let mut op = length_delimited(wire_type, buf)?;
                txn.failure.push(decode_op(&mut op, depth)?);
            }
            _ => skip_field(wire_type, tag, buf, DecodeContext::default()).map_err(malformed)?,
        }
    }
    Ok(txn)
}

/// A `RequestOp` of a txn `depth` levels down; the last request in it
/// counts, as in etcd.
fn decode_op(buf: &mut Bytes, depth: usize) -> Result<RequestOp, Status> {
    let mut op = RequestOp::default();
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(buf).map_err(malformed)?;
        if !(1..=4).contains(&tag) {
            skip_field(wire_type, tag, buf, DecodeContext::default()).map_err(malformed)?;
            continue;
        }
        let mut field = length_delimited(wire_type, buf)?;
        op.request = Some(match tag {
            1 => Request::RequestRange(Message::decode(field).map_err(malformed)?),
            2 => Request::RequestPut(Message::decode(field).map_err(malformed)?),
            3 => Request::RequestDeleteRange(Message::decode(field).map_err(malformed)?),
            _ => Request::RequestTxn(decode_txn(&mut field, depth + 1)?),
        });
    }
    Ok(op)
}

/// The bytes of a length-delimited field, taken off `buf`.
fn length_delimited(wire_type: WireType, buf: &mut Bytes) -> Result<Bytes, Status> {
    prost::encoding::check_wire_type(WireType::LengthDelimited, wire_type).map_err(malformed)?;
    let len = decode_varint(buf).map_err(malformed)?;
    match usize::try_from(len) {
        Ok(len) if len <= buf.remaining() => Ok(buf.split_to(len)),
        _ => Err(Status::internal(
            "failed to decode Protobuf message: buffer underflow",
        )),
    }
}

/// A message that is not protobuf, answered as tonic's own codec does
/// (Internal, as grpc-go does too).
fn malformed(err: prost::DecodeError) -> Status {
    Status::internal(err.to_string())
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use prost::encoding::encode_varint;
    use tonic::Code;

    use super::*;
    use crate::grpc::pb::etcdserverpb::{
        compare, response_op::Response, Compare, DeleteRangeRequest, PutRequest, PutResponse,
        RangeRequest, RangeResponse, ResponseHeader, ResponseOp, TxnResponse,
    };
    use crate::grpc::pb::mvccpb::KeyValue;

    fn put(key: &str) -> RequestOp {
        RequestOp {
            request: Some(Request::RequestPut(PutRequest {
                key: key.into(),
                value: b"v".to_vec(),
                lease: 7,
                ..Default::default()
            })),
        }
    }

    fn nested(depth: usize) -> TxnRequest {
        (1..depth).fold(
            TxnRequest {
                success: vec![put("leaf")],
                ..Default::default()
            },
            |inner, _| TxnRequest {
                success: vec![RequestOp {
                    request: Some(Request::RequestTxn(inner)),
                }],
                ..Default::default()
            },
        )
    }

    #[test]
    fn reads_a_txn_as_prost_does() {
        let txn = TxnRequest {
            compare: vec![Compare {
                result: 3,
                target: 4,
                key: b"k".to_vec(),
                range_end: b"z".to_vec(),
                target_union: Some(compare::TargetUnion::Value(b"v".to_vec())),
            }],
            success: vec![
                RequestOp {
                    request: Some(Request::RequestRange(RangeRequest {
                        key: b"a".to_vec(),
                        limit: 3,
                        ..Default::default()
                    })),
                },
                put("p"),
                RequestOp { request: None },
            ],
            failure: vec![
                RequestOp {
                    request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
                        key: b"d".to_vec(),
                        prev_kv: true,
                        ..Default::default()
                    })),
                },
                RequestOp {
                    request: Some(Request::RequestTxn(nested(3))),
                },
            ],
        };
        let mut encoded = txn.encode_to_vec();
        // A field this API does not know is skipped, as prost skips it.
        encoded.extend_from_slice(&[0x78, 0x01]);
        assert_eq!(decode_txn_request(&mut encoded.as_slice()).unwrap(), txn);
    }

    #[test]
    fn reads_nesting_up_to_the_bound() {
        let deep = nested(MAX_TXN_DEPTH);
        let encoded = deep.encode_to_vec();
        assert_eq!(decode_txn_request(&mut encoded.as_slice()).unwrap(), deep);
        let err = decode_txn_request(&mut nested(MAX_TXN_DEPTH + 1).encode_to_vec().as_slice())
            .unwrap_err();
        assert_eq!(
            (err.code(), err.message()),
            (Code::InvalidArgument, status::TOO_MANY_OPS)
        );
    }

    /// A txn in a txn `depth` times, written without recursion (prost's
    /// encoder would recurse as deep).
    fn nested_bytes(depth: usize) -> Vec<u8> {
        let mut txn: Vec<u8> = Vec::new();
        for _ in 0..depth {
            let mut op = Vec::new();
            op.put_u8(4 << 3 | 2);
            encode_varint(txn.len() as u64, &mut op);
            op.extend_from_slice(&txn);
            txn.clear();
            txn.put_u8(2 << 3 | 2);
            encode_varint(op.len() as u64, &mut txn);
            txn.extend_from_slice(&op);
        }
        txn
    }

    #[test]
    fn deeper_than_the_bound_is_too_many_operations_whatever_the_depth() {
        // `nested_bytes(n)` is n + 1 levels (the innermost txn empty);
        // 20 000 is far past what prost reads at all.
        for wrappers in [MAX_TXN_DEPTH, MAX_TXN_DEPTH + 1, 128, 20_000] {
            let bytes = nested_bytes(wrappers);
            let err = decode_txn_request(&mut bytes.as_slice()).unwrap_err();
            assert_eq!(
                (err.code(), err.message()),
                (Code::InvalidArgument, status::TOO_MANY_OPS),
                "{} levels",
                wrappers + 1
            );
        }
        let bytes = nested_bytes(MAX_TXN_DEPTH - 1);
        assert!(decode_txn_request(&mut bytes.as_slice()).is_ok());
    }

    /// The answer to a txn `depth` levels deep as the store gives it: a
    /// header on every response, and at the bottom the deepest nesting
    /// an op can answer with (a range's key-values, a put's previous
    /// key-value).
    fn nested_answer(depth: usize) -> TxnResponse {
        let header = || Some(ResponseHeader::default());
        let kv = || KeyValue {
            key: b"k".to_vec(),
            ..Default::default()
        };
        let bottom = TxnResponse {
            header: header(),
            succeeded: true,
            responses: vec![
                ResponseOp {
                    response: Some(Response::ResponseRange(RangeResponse {
                        header: header(),
                        kvs: vec![kv()],
                        ..Default::default()
                    })),
                },
                ResponseOp {
                    response: Some(Response::ResponsePut(PutResponse {
                        header: header(),
                        prev_kv: Some(kv()),
                    })),
                },
            ],
        };
        (1..depth).fold(bottom, |inner, _| TxnResponse {
            header: header(),
            succeeded: true,
            responses: vec![ResponseOp {
                response: Some(Response::ResponseTxn(inner)),
            }],
        })
    }

    #[test]
    fn the_answer_to_the_deepest_txn_reads_with_protobufs_recursion_limit() {
        // prost's limit is 100 nested messages, as C++'s, Java's and
        // Python's protobuf are by default.
        let deepest = nested_answer(MAX_TXN_DEPTH).encode_to_vec();
        assert!(TxnResponse::decode(deepest.as_slice()).is_ok());
        // The bound is tight: one level more and the answer is unreadable.
        let deeper = nested_answer(MAX_TXN_DEPTH + 1).encode_to_vec();
        let err = TxnResponse::decode(deeper.as_slice()).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
    }

    #[test]
    fn a_truncated_or_mistyped_txn_is_internal_as_with_prost() {
        let encoded = nested(3).encode_to_vec();
        let truncated = &encoded[..encoded.len() - 2];
        let err = decode_txn_request(&mut &truncated[..]).unwrap_err();
        assert_eq!(err.code(), Code::Internal, "{err:?}");
        // success (field 2) sent as a varint
        let err = decode_txn_request(&mut &[2 << 3, 1][..]).unwrap_err();
        assert_eq!(err.code(), Code::Internal, "{err:?}");
    }
}
