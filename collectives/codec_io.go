package collectives

import "github.com/sparcml/sparcml/quant"

// The codecs work on float32 and float64 through separate entry points;
// these pick the one for T.

// encodeTo encodes src with the codec's float32 or float64 entry point.
func encodeTo[T Float](c quant.Codec, dst []byte, src []T) ([]byte, error) {
	if elemSize[T]() == 4 {
		return c.Encode(dst, FromBytes[float32](AsBytes(src)))
	}
	return c.Encode64(dst, FromBytes[float64](AsBytes(src)))
}

// decodeInto decodes src into dst, or adds the decoded values to dst.
func decodeInto[T Float](c quant.Codec, dst []T, src []byte, add bool) error {
	if elemSize[T]() == 4 {
		d := FromBytes[float32](AsBytes(dst))
		if add {
			return c.DecodeAdd(d, src)
		}
		return c.Decode(d, src)
	}
	d := FromBytes[float64](AsBytes(dst))
	if add {
		return c.DecodeAdd64(d, src)
	}
	return c.Decode64(d, src)
}
