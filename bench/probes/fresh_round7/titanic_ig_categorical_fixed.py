# expect: clean
# source: https://github.com/meta-pytorch/captum/issues/1571
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)


class TitanicDNNModel(nn.Module):
    def __init__(self, num_sex, num_embarked, num_pclass, embedding_dim=4):
        super(TitanicDNNModel, self).__init__()
        # Embedding layers
        self.sex_embedding = nn.Embedding(num_sex, embedding_dim)
        self.embarked_embedding = nn.Embedding(num_embarked, embedding_dim)
        self.pclass_embedding = nn.Embedding(num_pclass, embedding_dim)
        # FC layers
        self.fc_input_dim = embedding_dim * 3 + 3  # 3 embedded features + 3 numerical
        self.fc1 = nn.Linear(self.fc_input_dim, 64)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(64, 32)
        self.relu2 = nn.ReLU()
        self.fc3 = nn.Linear(32, 2)  # Output logits for 2 classes
        self.softmax = nn.Softmax(dim=1)

    def forward(self, sex, embarked, pclass, age, parch, fare):
        # Embed categorical features
        sex_emb = self.sex_embedding(sex.long()).view(sex.size(0), -1)
        embarked_emb = self.embarked_embedding(embarked.long()).view(embarked.size(0), -1)
        pclass_emb = self.pclass_embedding(pclass.long()).view(pclass.size(0), -1)
        x = torch.cat([sex_emb, embarked_emb, pclass_emb,
                       age.unsqueeze(1), parch.unsqueeze(1), fare.unsqueeze(1)], dim=1)
        x = self.relu1(self.fc1(x))
        x = self.relu2(self.fc2(x))
        return self.softmax(self.fc3(x))


class IntegratedGradients:  # captum's calling convention, Riemann-sum steps
    def __init__(self, forward_func, n_steps=25):
        self.forward_func = forward_func
        self.n_steps = n_steps

    def attribute(self, inputs, baselines, target, additional_forward_args=()):
        alphas = torch.linspace(0.0, 1.0, self.n_steps)
        scaled = [torch.cat([b + a * (x - b) for a in alphas]).requires_grad_() for x, b in zip(inputs, baselines)]
        extra = [torch.cat([t] * self.n_steps) for t in additional_forward_args]
        out = self.forward_func(*scaled, *extra)[:, target]
        grads = torch.autograd.grad(out.sum(), scaled)
        n = inputs[0].shape[0]
        return tuple((x - b) * g.view(self.n_steps, n).mean(0) for x, b, g in zip(inputs, baselines, grads))


# synthetic stand-in for the Kaggle csv after LabelEncoder / StandardScaler
n = 400
sex, embarked, pclass = (torch.tensor(np.random.randint(0, k, n), dtype=torch.float32) for k in (2, 3, 3))
age, parch, fare = (torch.tensor(np.random.randn(n), dtype=torch.float32) for _ in range(3))
survived = ((sex == 1) | (pclass == 0)).long()

model = TitanicDNNModel(num_sex=2, num_embarked=3, num_pclass=3)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(15):
    optimizer.zero_grad()
    probs = model(sex, embarked, pclass, age, parch, fare)
    loss = nn.functional.nll_loss(torch.log(probs + 1e-8), survived)
    loss.backward()
    optimizer.step()
print("train loss", loss.item())
model.eval()

def forward_numeric(age, parch, fare, sex, embarked, pclass):
    # categorical columns are nn.Embedding indices: pass them as additional_forward_args
    return model(sex, embarked, pclass, age, parch, fare)

ig = IntegratedGradients(forward_numeric)
test = (age[:8], parch[:8], fare[:8])
attributions = ig.attribute(inputs=test, baselines=tuple(torch.zeros_like(t) for t in test), target=1,
                            additional_forward_args=(sex[:8], embarked[:8], pclass[:8]))
for name, attr in zip(["age", "parch", "fare"], attributions):
    print(name, attr.abs().mean().item())
