"""Diagnosis (reads labels, for this report only): does the size of the smallest k-means cluster of a training set
(paper split, seed 0, standardised) estimate its contamination, or hold the anomalies? Run from the repo root:
    python3 docs/results/cluster_estimate/clusterdiag.py"""
import glob, os, json, numpy as np
from sklearn.cluster import KMeans
from offline_train.data import load_npz
from offline_train.evaluation.protocol import make_split
from offline_train.scaler import Scaler
rows=[]
for p in sorted(glob.glob('../shared/data/adbench/*.npz')):
    ds=os.path.basename(p)[:-4]; X,y=load_npz(p)
    for setting in ('semi','unsup'):
        s=make_split(y,setting,'paper',0); sc=Scaler.fit(X[s.scaler_idx]); Z=sc.transform(X[s.train_idx]); ytr=y[s.train_idx]
        Z=Z[:, Z.std(0)>1e-9]
        r=dict(ds=ds,setting=setting,true=float(ytr.mean()))
        for k in (2,3,4):
            lab=KMeans(k,n_init=4,random_state=0).fit_predict(Z)
            sizes=np.bincount(lab,minlength=k)/len(Z)
            m=int(np.argmin(sizes))
            r[f'min{k}']=float(sizes[m])
            r[f'pur{k}']=float(ytr[lab==m].mean())
        rows.append(r)
json.dump(rows,open('docs/results/cluster_estimate/clusterdiag.json','w'))
un=[r for r in rows if r['setting']=='unsup']; se={r['ds']:r for r in rows if r['setting']=='semi'}
t=np.array([r['true'] for r in un])
for k in (2,3,4):
    print(f"k={k}: mean min-cluster share semi {np.mean([se[r['ds']][f'min{k}'] for r in un]):.3f} unsup {np.mean([r[f'min{k}'] for r in un]):.3f}; "
          f"corr with true {np.corrcoef(t,[r[f'min{k}'] for r in un])[0,1]:.2f}; unsup>semi on {sum(r[f'min{k}']>se[r['ds']][f'min{k}'] for r in un)}/26; "
          f"anomaly share in the minority cluster {np.mean([r[f'pur{k}'] for r in un]):.3f} vs base {t.mean():.3f}; purer than base on {sum(r[f'pur{k}']>r['true'] for r in un)}/26")
