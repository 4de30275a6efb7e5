"""What the cost model knows of an operator type from its name alone, in one table (:data:`TABLE`), one line per
op type: its **family** (types that do the same kind of work: an op type never measured takes its family's law),
its **twin** group (names of one computation, or of kernels of one cost: an aten op and the module that calls it;
the clamps ReLU, ReLU6 and Hardtanh; an op type never measured takes a measured twin's law before its family's,
since a family law mixes cheap and costly members: ReLU and GELU, max and average pooling) and its **work** rule,
how :mod:`opcost.analysis.features` counts its FLOPs and bytes:

===================  ====================================================================================
work                 FLOPs and bytes
===================  ====================================================================================
``conv``             convolution modules: ``2 x output elements x in_channels / groups x kernel volume``
``linear``           ``Linear``: ``2 x output elements x in_features``; the weight's bytes
``conv1d_gpt``       transformers' ``Conv1D`` (GPT-2's projection, a Linear with a transposed weight)
``matmul``           aten matrix products: ``2 x output elements x`` the first operand's last dimension
``addmm``            the same after the added term (``addmm(bias, x, w)``: ``x``'s last dimension)
``attention``        ``scaled_dot_product_attention``: ``4 x batch x heads x query x key length x head dim``
``embedding``        embedding modules: the rows touched; in backward (dense gradient) the whole table,
                     which the gradient zero-fills and accumulates into
``norm``             normalisation modules: elementwise, plus the affine parameters' bytes
``pool``             windowed pooling: ``output elements x kernel volume`` (each output reads its window: a
                     3x3 max pool of stride 1 costs about 3.5 times the one of stride 2 on the same input)
``view``             no work: a view, in both phases (its gradient is a view as well); an allocation left
                     uninitialised (``empty_like``)
``slice``            no work forward (a view); backward writes a zero gradient of the input's size and
                     copies the output's gradient in: the input's and the output's bytes
``expand``           no work forward; backward sums the gradient back to the input's shape
``copy_if_strided``  a copy of a strided input to a contiguous output (bytes); no work where it returns a
                     view (a contiguous input, or an output with the input's strides)
``dropout``          an identity in inference and at ``p = 0``; elementwise in training
``cast``             ``to``: no work where its output has its input's dtype (it returns its input),
                     elementwise otherwise
``elementwise``      (any other op type) the larger of the largest input's and the outputs' element counts
===================  ====================================================================================

A module class whose name ends in ``RMSNorm`` or ``RotaryEmbedding`` (the per-model classes of Hugging Face
transformers) takes the line of Llama's (:data:`SUFFIXES`). An op type neither names has no family and no twin,
and elementwise work.

Op types are keys (tables, the database, the cost model): a module call's is its class name (``Linear``), a
functional call's (an aten op outside leaf modules) its aten name without namespace (``linear``), followed by
``_training`` where the op's ``training`` argument is true (:func:`opcost.model.extract.functional_type`: a batch
norm that computes its statistics, ``batch_norm_training``, is another computation than one that reads
them). What a reader sees is :func:`label`: the class name for a module, ``aten::linear`` for a functional call, so
that ``F.linear`` inside a model never reads as a second ``Linear``; the same form as the top-level ops of a Kineto
trace.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# name                         family         twin           work
TABLE = """
Linear                         matmul         linear         linear
linear                         matmul         linear         matmul
Conv1D                         matmul         linear         conv1d_gpt
addmm                          matmul         linear         addmm
mm                             matmul         -              matmul
bmm                            matmul         -              matmul
matmul                         matmul         -              matmul
baddbmm                        matmul         -              addmm
addbmm                         matmul         -              addmm
einsum                         matmul         -              matmul
Conv1d                         convolution    conv1d         conv
conv1d                         convolution    conv1d         elementwise
Conv2d                         convolution    conv2d         conv
conv2d                         convolution    conv2d         elementwise
Conv3d                         convolution    -              conv
ConvTranspose1d                convolution    -              conv
ConvTranspose2d                convolution    -              conv
ConvTranspose3d                convolution    -              conv
convolution                    convolution    -              elementwise
scaled_dot_product_attention   attention      sdpa           attention
_scaled_dot_product_flash_attention_for_cpu attention sdpa   attention
MultiheadAttention             attention      -              elementwise
BatchNorm1d                    normalisation  -              norm
BatchNorm2d                    normalisation  batch_norm     norm
BatchNorm3d                    normalisation  -              norm
batch_norm                     normalisation  batch_norm     elementwise
batch_norm_training            -              -              elementwise
FrozenBatchNorm2d              normalisation  -              norm
LayerNorm                      normalisation  layer_norm     norm
layer_norm                     normalisation  layer_norm     elementwise
native_layer_norm              normalisation  layer_norm     elementwise
LayerNorm2d                    normalisation  -              norm
GroupNorm                      normalisation  group_norm     norm
group_norm                     normalisation  group_norm     elementwise
InstanceNorm2d                 normalisation  -              norm
RMSNorm                        normalisation  -              norm
LlamaRMSNorm                   normalisation  rms_norm_py    norm
SweepRMSNorm                   normalisation  rms_norm_py    norm
T5LayerNorm                    normalisation  rms_norm_py    norm
rms_norm                       normalisation  -              elementwise
ReLU                           activation     relu           elementwise
relu                           activation     relu           elementwise
relu_                          activation     relu           elementwise
ReLU6                          activation     relu           elementwise
relu6                          activation     relu           elementwise
Hardtanh                       activation     relu           elementwise
hardtanh                       activation     relu           elementwise
hardtanh_                      activation     relu           elementwise
GELU                           activation     gelu           elementwise
gelu                           activation     gelu           elementwise
GELUActivation                 activation     gelu           elementwise
NewGELUActivation              activation     gelu_tanh_py   elementwise
TanhGELU                       activation     gelu_tanh_py   elementwise
FastGELUActivation             activation     gelu_tanh_py   elementwise
SiLU                           activation     silu           elementwise
silu                           activation     silu           elementwise
silu_                          activation     silu           elementwise
SiLUActivation                 activation     silu           elementwise
Sigmoid                        activation     sigmoid        elementwise
sigmoid                        activation     sigmoid        elementwise
Tanh                           activation     tanh           elementwise
tanh                           activation     tanh           elementwise
Hardswish                      activation     hardswish      elementwise
hardswish                      activation     hardswish      elementwise
hardswish_                     activation     hardswish      elementwise
Hardsigmoid                    activation     hardsigmoid    elementwise
hardsigmoid                    activation     hardsigmoid    elementwise
LeakyReLU                      activation     -              elementwise
leaky_relu                     activation     -              elementwise
ELU                            activation     -              elementwise
elu                            activation     -              elementwise
Mish                           activation     -              elementwise
mish                           activation     -              elementwise
Softplus                       activation     -              elementwise
softplus                       activation     -              elementwise
Softmax                        softmax        softmax        elementwise
softmax                        softmax        softmax        elementwise
_softmax                       softmax        softmax        elementwise
_safe_softmax                  softmax        softmax        elementwise
LogSoftmax                     softmax        -              elementwise
log_softmax                    softmax        -              elementwise
MaxPool1d                      pooling        -              pool
MaxPool2d                      pooling        max_pool2d     pool
MaxPool3d                      pooling        -              pool
max_pool2d                     pooling        max_pool2d     pool
AvgPool1d                      pooling        -              pool
AvgPool2d                      pooling        avg_pool2d     pool
AvgPool3d                      pooling        -              pool
avg_pool2d                     pooling        avg_pool2d     pool
AdaptiveAvgPool1d              pooling        -              elementwise
AdaptiveAvgPool2d              pooling        adaptive_avg   elementwise
adaptive_avg_pool2d            pooling        adaptive_avg   elementwise
AdaptiveMaxPool2d              pooling        -              elementwise
mean                           reduction      -              elementwise
sum                            reduction      -              elementwise
all                            reduction      -              elementwise
any                            reduction      -              elementwise
var                            reduction      -              elementwise
std                            reduction      -              elementwise
amax                           reduction      -              elementwise
amin                           reduction      -              elementwise
max                            reduction      -              elementwise
min                            reduction      -              elementwise
logsumexp                      reduction      -              elementwise
linalg_vector_norm             reduction      -              elementwise
norm                           reduction      -              elementwise
SweepRotaryEmbedding           rotary         rotary_emb     elementwise
Embedding                      embedding      embedding      embedding
embedding                      embedding      embedding      elementwise
EmbeddingBag                   embedding      embedding_bag  embedding
embedding_bag                  embedding      embedding_bag  elementwise
Dropout                        dropout        dropout        dropout
dropout                        dropout        dropout        dropout
Dropout1d                      dropout        -              dropout
Dropout2d                      dropout        -              dropout
Dropout3d                      dropout        -              dropout
AlphaDropout                   dropout        -              dropout
DropPath                       dropout        -              dropout
native_dropout                 dropout        -              dropout
bernoulli_                     dropout        -              elementwise
add                            elementwise    add            elementwise
add_                           elementwise    add            elementwise
mul                            elementwise    mul            elementwise
mul_                           elementwise    mul            elementwise
sub                            elementwise    -              elementwise
sub_                           elementwise    -              elementwise
div                            elementwise    -              elementwise
div_                           elementwise    -              elementwise
where                          elementwise    -              elementwise
masked_fill                    elementwise    -              elementwise
pow                            elementwise    -              elementwise
rsqrt                          elementwise    -              elementwise
sqrt                           elementwise    -              elementwise
exp                            elementwise    -              elementwise
neg                            elementwise    -              elementwise
clamp                          elementwise    -              elementwise
maximum                        elementwise    -              elementwise
minimum                        elementwise    -              elementwise
eq                             elementwise    -              elementwise
ne                             elementwise    -              elementwise
lt                             elementwise    -              elementwise
gt                             elementwise    -              elementwise
cos                            elementwise    -              elementwise
sin                            elementwise    -              elementwise
erf                            elementwise    -              elementwise
cumsum                         elementwise    -              elementwise
addcmul                        elementwise    -              elementwise
addcdiv                        elementwise    -              elementwise
rsub                           elementwise    -              elementwise
multiply                       elementwise    -              elementwise
floor_divide                   elementwise    -              elementwise
reciprocal                     elementwise    -              elementwise
square                         elementwise    -              elementwise
abs                            elementwise    -              elementwise
log                            elementwise    -              elementwise
log1p                          elementwise    -              elementwise
expm1                          elementwise    -              elementwise
clamp_min                      elementwise    -              elementwise
clamp_max                      elementwise    -              elementwise
le                             elementwise    -              elementwise
ge                             elementwise    -              elementwise
bitwise_not                    elementwise    -              elementwise
logical_not                    elementwise    -              elementwise
logical_and                    elementwise    -              elementwise
logical_or                     elementwise    -              elementwise
__and__                        elementwise    -              elementwise
__or__                         elementwise    -              elementwise
masked_fill_                   elementwise    -              elementwise
triu                           elementwise    -              elementwise
tril                           elementwise    -              elementwise
empty                          allocation     -              view
empty_like                     allocation     -              view
new_empty                      allocation     -              view
zeros                          allocation     -              elementwise
arange                         allocation     -              elementwise
zeros_like                     allocation     -              elementwise
new_zeros                      allocation     -              elementwise
ones                           allocation     -              elementwise
ones_like                      allocation     -              elementwise
full                           allocation     -              elementwise
full_like                      allocation     -              elementwise
zero_                          allocation     -              elementwise
fill_                          allocation     -              elementwise
new_ones                       allocation     -              elementwise
new_full                       allocation     -              elementwise
scalar_tensor                  allocation     -              elementwise
rand                           allocation     -              elementwise
randn                          allocation     -              elementwise
eye                            allocation     -              elementwise
cat                            copy           -              elementwise
stack                          copy           -              elementwise
clone                          copy           -              elementwise
copy_                          copy           -              elementwise
to                             copy           -              cast
index                          copy           -              elementwise
gather                         copy           -              elementwise
index_select                   copy           -              elementwise
type_as                        copy           -              cast
pad                            copy           -              elementwise
constant_pad_nd                copy           -              elementwise
repeat                         copy           -              elementwise
repeat_interleave              copy           -              elementwise
tile                           copy           -              elementwise
roll                           copy           -              elementwise
flip                           copy           -              elementwise
unfold                         copy           -              elementwise
im2col                         copy           -              elementwise
col2im                         copy           -              elementwise
upsample_nearest2d             copy           -              elementwise
upsample_bilinear2d            copy           -              elementwise
upsample_bicubic2d             copy           -              elementwise
upsample_linear1d              copy           -              elementwise
contiguous                     copy           -              copy_if_strided
reshape                        copy           -              copy_if_strided
reshape_as                     copy           -              copy_if_strided
flatten                        copy           flatten        copy_if_strided
Flatten                        copy           flatten        copy_if_strided
view                           view           -              view
view_as                        view           -              view
_unsafe_view                   view           -              view
squeeze                        view           -              view
unsqueeze                      view           -              view
permute                        view           -              view
transpose                      view           -              view
t                              view           -              view
movedim                        view           -              view
unflatten                      view           -              view
Unflatten                      view           -              view
as_strided                     view           -              view
detach                         view           -              view
detach_                        view           -              view
lift_fresh                     view           -              view
alias                          view           -              view
is_nonzero                     view           -              view
item                           view           -              view
_local_scalar_dense            view           -              view
Identity                       view           -              view
select                         view           -              slice
narrow                         view           -              slice
slice                          view           -              slice
split                          view           -              slice
split_with_sizes               view           -              slice
chunk                          view           -              slice
unbind                         view           -              slice
diagonal                       view           -              slice
expand                         view           -              expand
expand_as                      view           -              expand
"""

WORK = ("conv", "linear", "conv1d_gpt", "matmul", "addmm", "attention", "embedding", "norm", "pool", "view", "slice",
        "expand", "copy_if_strided", "dropout", "cast", "elementwise")


@dataclass(frozen=True)
class OpType:
    """One line of :data:`TABLE`."""

    name: str
    family: str | None
    twin: str | None
    work: str


def _parse(text: str) -> dict[str, OpType]:
    out = {}
    for line in text.strip().splitlines():
        name, family, twin, work = line.split()
        if name in out or work not in WORK:
            raise ValueError(f"optypes.TABLE: {line!r}: {'listed twice' if name in out else 'unknown work'}")
        out[name] = OpType(name, None if family == "-" else family, None if twin == "-" else twin, work)
    return out


OP_TYPES: dict[str, OpType] = _parse(TABLE)
FAMILIES: dict[str, tuple[str, ...]] = {}
TWINS: dict[str, tuple[str, ...]] = {}
for _t in OP_TYPES.values():
    if _t.family:
        FAMILIES[_t.family] = (*FAMILIES.get(_t.family, ()), _t.name)
    if _t.twin:
        TWINS[_t.twin] = (*TWINS.get(_t.twin, ()), _t.name)
COMPUTE_FAMILIES = frozenset({"matmul", "convolution", "attention"})  # scaled by FLOPs, not bytes, when no law


# module classes the table need not list one by one: a name ending in the suffix (and longer than it) takes the
# line of the named type. Hugging Face models name their RMSNorm and rotary-embedding classes after the model
# (LlamaRMSNorm, Qwen2RMSNorm, MistralRMSNorm, GemmaRMSNorm...; LlamaRotaryEmbedding, Qwen2RotaryEmbedding...), each
# computed in Python as Llama's is; torch's own ``RMSNorm`` (one fused operator) is listed apart.
SUFFIXES = (("RMSNorm", "LlamaRMSNorm"), ("RotaryEmbedding", "SweepRotaryEmbedding"))


def lookup(op_type: str, base: str | None = None) -> OpType:
    """The table's line of ``op_type``, else that of its ``base`` (:func:`base_class`: the nearest base class the
    table names, of a module class it does not: timm's ``StdConv2d`` a ``Conv2d``), else that of a
    :data:`SUFFIXES` rule its name matches; an op type none names: no family, no twin, elementwise work."""
    if op_type in OP_TYPES:
        return OP_TYPES[op_type]
    like = base if base in OP_TYPES else next((like for suffix, like in SUFFIXES
                                               if op_type.endswith(suffix) and op_type != suffix), None)
    if like is not None:
        t = OP_TYPES[like]
        return OpType(op_type, t.family, t.twin or like, t.work)
    return OpType(op_type, None, None, "elementwise")


def unlisted(op_type: str, base: str | None = None) -> bool:
    """Whether the table has no line for ``op_type`` of its own or of a base class (a model's own module class;
    a :data:`SUFFIXES` rule gives it a family and a twin to learn from, no measurement of its computation): its
    calls run aten operators the table does know (:mod:`opcost.analysis.composed`)."""
    return op_type not in OP_TYPES and base not in OP_TYPES


PYTHON = "_py"  # the end of a twin group's name whose members are written in Python over aten calls


def python_composed(op_type: str, base: str | None = None) -> bool:
    """Whether ``op_type``'s line is a computation its module writes in Python over aten calls (a twin group ending
    in :data:`PYTHON`: Llama's RMSNorm, GPT-2's tanh GELU, about ten elementwise calls each): never measured itself
    or through a twin, it costs its calls (:mod:`opcost.analysis.composed`), not its family's one fused kernel."""
    twin = lookup(op_type, base).twin
    return bool(twin) and twin.endswith(PYTHON)


def family(op_type: str, base: str | None = None) -> str | None:
    return lookup(op_type, base).family


LAYOUT = "@"  # joins an op type and a layout the cost model keeps apart: Conv2d@strided (features.layout)


def variant(op_type: str, layout: str | None) -> str:
    """The name the cost model keys ``op_type`` by in ``layout`` (none or "": the op type itself)."""
    return f"{op_type}{LAYOUT}{layout}" if layout else op_type


def twins(op_type: str, base: str | None = None) -> tuple[str, ...]:
    """The other op types of ``op_type``'s twin group (none without one); a subclass's include its base. Of a
    layout variant (:func:`variant`): its twins in the same layout first, then its own op type and its twins in any
    layout (a law of the plain layout answers where no law of its own is measured)."""
    if LAYOUT in op_type:
        plain, order = op_type.split(LAYOUT, 1)
        others = (plain, *twins(plain, None if base == plain else base))
        return tuple(dict.fromkeys([*(variant(t, order) for t in others if t != plain), *others]))
    group = lookup(op_type, base).twin
    members = TWINS.get(group, (group,) if group in OP_TYPES else ())
    return tuple(t for t in members if t != op_type) if group else ()


def work(op_type: str, base: str | None = None) -> str:
    return lookup(op_type, base).work


BASE = "base_class"  # the `params` key of a module's base_class (opcost.model.extract.module_params)


def base_class(cls: type) -> type | None:
    """The nearest base class of module class ``cls`` that :data:`TABLE` names (a torch module), for a class it does
    not name itself: a subclass computes what its base does, often with more (timm's ``StdConv2d`` standardises its
    weight, then convolves); None where the table names ``cls`` or no base."""
    if cls.__name__ in OP_TYPES:
        return None
    return next((c for c in cls.__mro__[1:] if c.__name__ in OP_TYPES and c.__module__.startswith("torch.")), None)


_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ATEN = "aten::"


def label(op_type: str, scope: str | None = None) -> str:
    """The name a reader sees for ``op_type`` (see the module docstring): ``Linear`` for the module, ``aten::linear``
    for the functional call. ``scope`` (the layers' `module` or `functional`) decides where given; without it the
    name does: module classes are capitalised, aten ops are not. Names that already say what they are (a trace's
    ``aten::linear`` or autograd node, ``autograd engine``, ``<end>``, ``other``) are returned as they are."""
    if scope == "module" or not _BARE.fullmatch(op_type) or op_type == "other":
        return op_type
    return ATEN + op_type if scope == "functional" or not op_type[0].isupper() else op_type


def labels(rows) -> list[str]:
    """:func:`label` of each row of a frame with an `op_type` column (and a `scope` column where it has one)."""
    scopes = rows["scope"] if "scope" in rows else [None] * len(rows)
    return [label(t, s if isinstance(s, str) else None) for t, s in zip(rows["op_type"], scopes)]
