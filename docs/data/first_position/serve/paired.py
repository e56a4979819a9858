import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path + "/serve.json"))
    cells = {c["server"]: c["first_content"] for c in d["cells"] if c["clients"] == 1}
    ref, a, b = cells["ragkv-local"], cells["ragkv"], cells["ragkv-first"]
    n = min(len(ref), len(a), len(b))
    only_a = sum(1 for i in range(n) if a[i] == ref[i] and b[i] != ref[i])
    only_b = sum(1 for i in range(n) if b[i] == ref[i] and a[i] != ref[i])
    both = sum(1 for i in range(n) if a[i] == ref[i] and b[i] == ref[i])
    same = sum(1 for i in range(n) if a[i] == b[i])
    print(path, "n", n, "both agree", both, "only plain", only_a, "only first-position", only_b, "plain == first-position", same)
