"""Chat prompts shared by the HF decode-loop tests (``test_hf_static``, ``test_hf_grouped``): short and
long, with and without a system message, so left padding and rows finishing at different steps are exercised."""

PROMPTS = [
    [{"role": "user", "content": "Ava has 12 marbles. She buys 7 more."}],
    [{"role": "system", "content": "Solve."}, {"role": "user", "content": "What is 3 * 4?"}],
    [{"role": "user", "content": "Hugo has 5 crates with 20 apples in each. How many apples in all?"}],
    [{"role": "user", "content": "hi"}],
]
