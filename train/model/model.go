// Package model holds the models of `sparcml train` and their gradients:
// sparse logistic regression (binary and multinomial), whose mini-batch
// gradient touches only the features present in the batch and comes out
// as a sparse vector, and a multi-layer perceptron classifier (ReLU
// hidden layers, softmax cross-entropy), in plain Go and float32.
//
// A model keeps its parameters in one flat vector, the concatenation of
// its tensors w0, b0, w1, b1, ... (w_i of shape [inputs, outputs],
// row-major), so one allreduce carries the whole gradient and the saved
// model is the same arrays.
package model

import (
	"math"

	"github.com/sparcml/sparcml"
	"github.com/sparcml/sparcml/train/data"
)

// Tensor names a part of the flat parameter vector.
type Tensor struct {
	Name   string // w0, b0, w1, ...
	Shape  []int  // [inputs, outputs] for weights, [outputs] for biases
	Offset int    // first element in Params()
}

// Size is the number of elements.
func (t Tensor) Size() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Model is a classifier trained by gradient descent on its flat
// parameter vector.
type Model interface {
	// Params is the flat parameter vector; the optimizer updates it in
	// place.
	Params() []float32
	// Tensors lists the parts of Params in order.
	Tensors() []Tensor
	// Classes is the number of classes it predicts.
	Classes() int
	// Gradient overwrites grad (len(Params())) with the gradient of the
	// batch's mean loss and returns that loss.
	Gradient(b data.Batch, grad []float32) float64
	// Evaluate returns the summed loss and the number of samples
	// predicted right.
	Evaluate(b data.Batch) (lossSum float64, correct int)
	// Describe is a one-line description ("mlp 784-1024-256-10, 1068810 parameters").
	Describe() string
}

// SparseModel is a model whose gradient touches only some parameters.
type SparseModel interface {
	Model
	// SparseGradient sets g to the gradient of the batch's mean loss, in
	// sparse form (the parameters the batch touches), and returns that
	// loss.
	SparseGradient(b data.Batch, g *sparcml.SparseVector[float32]) float64
}

// logSoftmax turns logits into log-probabilities in place and returns the
// cross-entropy of class y.
func logSoftmax(z []float32, y int32) float64 {
	m := z[0]
	for _, v := range z[1:] {
		m = max(m, v)
	}
	var s float64
	for _, v := range z {
		s += math.Exp(float64(v - m))
	}
	lse := float64(m) + math.Log(s)
	for i, v := range z {
		z[i] = float32(float64(v) - lse)
	}
	return -float64(z[y])
}

// argmax is the index of the largest value (the first of equals).
func argmax(z []float32) int {
	best := 0
	for i, v := range z {
		if v > z[best] {
			best = i
		}
	}
	return best
}

// softplus is log(1 + e^z), computed without overflow.
func softplus(z float64) float64 {
	if z > 0 {
		return z + math.Log1p(math.Exp(-z))
	}
	return math.Log1p(math.Exp(z))
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}
