"""What the measurements say: predictions, the coverage loop, traces, the cost model.

``predict`` sums count x cost per workload and checks it against end-to-end runs; ``loop`` decides which operator
types to profile next; ``trace`` records and analyses Kineto traces (op -> kernel tree, CPU overheads T1-T5, the
overhead model); ``features`` and ``costmodel`` estimate configurations never measured; ``estimate`` predicts any
model from a database (``opcost predict``); ``tiers`` the whole model on each slower memory tier, from the
operators' placement slowdowns, against the workload timed on that tier.
"""
