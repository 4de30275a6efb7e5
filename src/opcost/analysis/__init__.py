"""What the measurements say: predictions, the coverage loop, traces, the cost model.

``predict`` sums count x cost per workload and checks it against end-to-end runs; ``loop`` decides which operator
types to profile next; ``trace_parse`` reads Kineto traces (recorded by :mod:`opcost.measure.trace`),
``trace_analysis`` analyses them (op -> kernel tree, breakdowns, CPU overheads T1-T5) and ``overhead`` models the
overhead between operators from them; ``features`` and ``costmodel`` estimate configurations never measured;
``estimate`` predicts any model from a database (``opcost predict``); ``tiers`` the whole model on each slower
memory tier, from the operators' placement slowdowns, against the workload timed on that tier; ``optypes`` what an
op type's name says (family, twin, work rule, display label).
"""
