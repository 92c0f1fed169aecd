#!/usr/bin/env python3
"""The peers of `hpctrain ml` (scripts/compare-spark-sklearn.sh): scikit-learn and PySpark
MLlib fitting the same objective on the same data, timed around the fit alone (data already in
memory: numpy arrays for scikit-learn, a cached DataFrame for Spark). Prints one JSON line.

Every side's result is scored here, in float64 numpy, from the coefficients it returns:
logreg objective (1/n) sum CE + (l2/2)||W||^2 (intercept unpenalised) and test accuracy;
kmeans inertia (sum of squared distances to the nearest centre); linreg coefficients.
"""
import argparse
import json
import time

import h5py
import numpy as np


def load(path, targets=False):
    with h5py.File(path) as f:
        s = f["samples"]
        x = np.asarray(s, dtype=np.float64).reshape(s.shape[0], -1) * float(s.attrs.get("scale", 1.0))
        y = np.asarray(f["targets"]) if targets else np.asarray(f["labels"], dtype=np.int64)
    return x, y


def logreg_objective(x, y, w, b, lam):
    z = x @ w.T + b
    z -= z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean() + 0.5 * lam * (w * w).sum())


def inertia(x, c):
    d2 = (x * x).sum(1)[:, None] - 2 * x @ c.T + (c * c).sum(1)[None]
    return float(np.maximum(d2.min(1), 0).sum())


def sklearn_fit(a, x, y):
    if a.task == "logreg":
        from sklearn.linear_model import LogisticRegression
        m = LogisticRegression(C=1.0 / (len(x) * a.l2), max_iter=a.max_iter, tol=a.tol)
        t = time.perf_counter(); m.fit(x, y); sec = time.perf_counter() - t
        return sec, {"w": m.coef_, "b": m.intercept_, "iterations": int(np.max(m.n_iter_))}
    if a.task == "kmeans":
        from sklearn.cluster import KMeans
        m = KMeans(n_clusters=a.k, n_init=1, max_iter=a.max_iter, tol=a.tol, random_state=0)
        t = time.perf_counter(); m.fit(x); sec = time.perf_counter() - t
        return sec, {"centres": m.cluster_centers_, "iterations": int(m.n_iter_)}
    from sklearn.linear_model import LinearRegression
    m = LinearRegression()
    t = time.perf_counter(); m.fit(x, y); sec = time.perf_counter() - t
    return sec, {"w": m.coef_, "b": float(m.intercept_), "iterations": 1}


def spark_frame(spark, x, y, path):
    """numpy -> Parquet (pyarrow) -> a cached Spark DataFrame with a vector column."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.ml.functions import array_to_vector
    flat = pa.array(x.astype(np.float64).ravel())
    col = pa.FixedSizeListArray.from_arrays(flat, x.shape[1])
    pq.write_table(pa.table({"f": col, "label": pa.array(y)}), path)
    df = spark.read.parquet(path).select(array_to_vector("f").alias("features"), "label").cache()
    df.count()
    return df


def spark_fit(a, x, y):
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(f"local[{a.cores}]").appName("hpctrain-peer")
             .config("spark.driver.memory", a.spark_memory).config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark_frame(spark, x, y.astype(np.float64), a.scratch)
    if a.task == "logreg":
        from pyspark.ml.classification import LogisticRegression
        est = LogisticRegression(maxIter=a.max_iter, regParam=a.l2, elasticNetParam=0.0, standardization=False,
                                 family="multinomial", tol=a.tol)
        t = time.perf_counter(); m = est.fit(df); sec = time.perf_counter() - t
        res = {"w": m.coefficientMatrix.toArray(), "b": m.interceptVector.toArray(),
               "iterations": int(m.summary.totalIterations)}
    elif a.task == "kmeans":
        from pyspark.ml.clustering import KMeans
        est = KMeans(k=a.k, maxIter=a.max_iter, tol=a.tol, seed=0)
        t = time.perf_counter(); m = est.fit(df); sec = time.perf_counter() - t
        res = {"centres": np.array(m.clusterCenters()), "iterations": int(m.summary.numIter)}
    else:
        from pyspark.ml.regression import LinearRegression
        est = LinearRegression(solver="normal", regParam=0.0, standardization=False)
        t = time.perf_counter(); m = est.fit(df); sec = time.perf_counter() - t
        res = {"w": m.coefficients.toArray(), "b": float(m.intercept), "iterations": 1}
    spark.stop()
    return sec, res


def hpctrain_model(a, x, y):
    """Scores a model file hpctrain wrote (--model): the fit was timed by hpctrain itself."""
    with h5py.File(a.model) as f:
        if a.task == "kmeans":
            return 0.0, {"centres": np.array(f["centroids"]), "iterations": int(f.attrs["iterations"])}
        it = int(f.attrs.get("iterations", 1))
        w, b = np.array(f["coefficients"]), np.array(f["intercept"])
        return 0.0, {"w": w, "b": b if a.task == "logreg" else float(b[0]), "iterations": it}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", choices=["sklearn", "spark", "hpctrain"], required=True)
    ap.add_argument("--model", help="with --peer hpctrain: the model file to score")
    ap.add_argument("--task", choices=["logreg", "kmeans", "linreg"], required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--eval-data")
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max-iter", type=int, default=300)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--spark-memory", default="8g")
    ap.add_argument("--scratch", default="/tmp/hpctrain-ml-peer.parquet")
    a = ap.parse_args()
    x, y = load(a.data, targets=a.task == "linreg")
    sec, r = {"sklearn": sklearn_fit, "spark": spark_fit, "hpctrain": hpctrain_model}[a.peer](a, x, y)
    out = {"peer": a.peer, "task": a.task, "fit_seconds": sec, "iterations": r["iterations"]}
    if a.task == "logreg":
        out["objective"] = logreg_objective(x, y, r["w"], r["b"], a.l2)
        if a.eval_data:
            xt, yt = load(a.eval_data)
            out["test_accuracy"] = float(np.mean(np.argmax(xt @ r["w"].T + r["b"], 1) == yt))
    elif a.task == "kmeans":
        out["inertia"] = inertia(x, r["centres"])
    else:
        out["coefficients"] = [float(v) for v in r["w"]]
        out["intercept"] = r["b"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
