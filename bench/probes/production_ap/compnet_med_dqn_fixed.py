# expect: clean
# source: https://github.com/WOW5678/CompNet/issues/2
"""CompNet-style medication recommender: a DQN agent over EHR codes and a drug graph.

Diagnosis and procedure code sequences are encoded with two 1-D CNNs, the set of
drugs chosen so far is encoded by a relational GCN over a drug-drug interaction
graph, and a gated recurrent DQN picks one drug per step. The agent keeps a
replay memory, a target network and an epsilon-greedy policy; an Evaluate
helper reports Jaccard / recall / DDI rate. Synthetic MIMIC-like records, CPU.
"""
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1)
random.seed(1)
np.random.seed(1)

device = torch.device('cpu')
args = SimpleNamespace(EMB_SIZE=16, LR=1e-3, GAMMA=0.9, TARGET_UPDATE_ITER=5, BATCH_SIZE=8, max_step=4,
                       n_diag=30, n_proc=20, drug_vocab_size=10, n_patients=12, epochs=2, layer_sizes=[16, 16])
action_size = args.drug_vocab_size + 1  # last action == stop token
state_size = args.EMB_SIZE


def make_records(n):
    X, Y = [], []
    for _ in range(n):
        diag = np.random.randint(1, args.n_diag, size=np.random.randint(8, 14)).tolist()
        proc = np.random.randint(1, args.n_proc, size=np.random.randint(8, 12)).tolist()
        drugs = sorted(set(np.random.randint(0, args.drug_vocab_size, size=3).tolist()))
        X.append((diag, proc))
        Y.append(drugs)
    return X, Y


ddi_df = [[0, 3], [2, 5], [4, 7], [1, 8]]


def getADJ(action, selectedAction, ddi_pairs):
    n = args.drug_vocab_size
    adj = np.zeros((2, n, n), dtype=np.float32)
    chosen = [int(a) for a in selectedAction] + [int(action)]
    for i in chosen:
        for j in chosen:
            if i != j:
                adj[0, i, j] = 1.0
    for a, b in ddi_pairs:
        adj[1, a, b] = adj[1, b, a] = 1.0
    return adj


def get_torch_matrix(adj, dev):
    return torch.from_numpy(adj).to(dev)


class CNN(nn.Module):
    def __init__(self, vocab_size, emb_size, num_channels, hidden_dim, dropout):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.conv = nn.Sequential(nn.Conv1d(emb_size, num_channels, 3, stride=2), nn.Tanh(),
                                  nn.Conv1d(num_channels, num_channels, 3, stride=1))
        self.dropout = dropout
        self.out = nn.Linear(num_channels, hidden_dim)
        nn.init.kaiming_normal_(self.out.weight)

    def forward(self, x):
        x_emb = self.embedding(x).unsqueeze(0).permute(0, 2, 1)
        x = self.conv(x_emb)
        features = F.max_pool1d(x, x.size(2)).squeeze(2)
        features = F.dropout(features, p=self.dropout, training=self.training)
        return self.out(features)


class RGCN(nn.Module):
    def __init__(self, layer_sizes, num_nodes, num_relations=2, dev=device):
        super().__init__()
        self.node_emb = nn.Parameter(torch.randn(num_nodes, layer_sizes[0]) * 0.1)
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(num_relations, i, o) * 0.1)
                                         for i, o in zip(layer_sizes[:-1], layer_sizes[1:])])
        self.dev = dev

    def forward(self, adjacencies):
        h = self.node_emb
        for w in self.weights:
            msgs = torch.bmm(adjacencies, h.unsqueeze(0).expand(adjacencies.size(0), -1, -1))
            h = torch.tanh(torch.bmm(msgs, w).sum(0) + h)
        return h, h.mean(0, keepdim=True)


class DQN(nn.Module):
    def __init__(self, state_size, action_size):
        super().__init__()
        self.W = nn.Parameter(torch.FloatTensor(state_size, state_size))
        nn.init.xavier_uniform_(self.W.data)
        self.U = nn.Parameter(torch.FloatTensor(state_size, state_size))
        nn.init.xavier_uniform_(self.U.data)
        self.fc1 = nn.Linear(state_size, 64)
        self.fc2 = nn.Linear(64, action_size)
        self.learn_step_counter = 0

    def forward(self, x_):
        x_t, h_t_1 = x_[0], x_[1].to(device)
        state = torch.sigmoid(torch.mm(self.W, x_t.t()) + torch.mm(self.U, h_t_1.t()))
        output = self.fc2(F.relu(self.fc1(state.t())))
        return state.t(), output


class Agent:
    def __init__(self):
        self.epsilon, self.epsilon_min, self.epsilon_decay = 0.9, 0.05, 0.995
        self.cnn_diagnosis = CNN(args.n_diag + 2, args.EMB_SIZE, 32, args.EMB_SIZE, 0.5)
        self.cnn_procedure = CNN(args.n_proc + 2, args.EMB_SIZE, 32, args.EMB_SIZE, 0.5)
        self.rgcn = RGCN(args.layer_sizes, args.drug_vocab_size)
        self.model = DQN(state_size, action_size)
        self.target_model = DQN(state_size, action_size)
        self.model_params = (list(self.cnn_diagnosis.parameters()) + list(self.cnn_procedure.parameters())
                             + list(self.rgcn.parameters()) + list(self.model.parameters()))
        self.optimizier = torch.optim.Adam(self.model_params, lr=args.LR, betas=(0.9, 0.999), weight_decay=5.0)
        self.loss = nn.MSELoss()
        self.update_target_model()

    def reset(self, x):
        diagnosis_f = self.cnn_diagnosis(torch.LongTensor(x[0]))
        procedure_f = self.cnn_procedure(torch.LongTensor(x[1]))
        return torch.cat((diagnosis_f, procedure_f), 0)

    def act(self, x, h, selectedAction):
        if np.random.rand() < self.epsilon:
            while True:
                action = random.randrange(action_size)
                if action not in selectedAction:
                    return action, h
        next_h, output = self.model((x, h))
        with torch.no_grad():
            output = output.clone()
            while True:
                action = int(torch.max(output, 1)[1])
                if action not in selectedAction:
                    return action, next_h
                output[0][action] = -999999

    def new_state(self, f, g):
        a = F.softmax(torch.mm(f, g.t()), dim=0)
        f_ = torch.mm(a.t(), f)
        return f_ + g

    def step(self, action, selectedAction, y):
        if action == action_size - 1:
            return (2 if len(selectedAction) == len(y) else -2), 0
        reward = 1 if (int(action) in y and action not in selectedAction) else -1
        adjacencies = get_torch_matrix(getADJ(action, selectedAction, ddi_df), device)
        _, g = self.rgcn(adjacencies)
        return reward, g

    def replay(self, memory, batch_size):
        if self.model.learn_step_counter % args.TARGET_UPDATE_ITER == 0:
            self.update_target_model()
            if self.epsilon > self.epsilon_min:
                self.epsilon *= self.epsilon_decay
        self.model.learn_step_counter += 1
        batch_idx = np.random.choice(len(memory), batch_size)
        b_x, b_h, b_action, b_reward, b_next_x, b_next_h = zip(*[memory[i] for i in batch_idx])
        b_x = torch.cat(b_x, 0)
        b_h = torch.cat([item.to(device) for item in b_h], 0)
        b_reward = torch.FloatTensor(b_reward)
        b_action = torch.LongTensor(b_action).unsqueeze(1)
        b_next_x = torch.cat(b_next_x, 0)
        b_next_h = torch.cat([item.to(device) for item in b_next_h], 0)

        _, q_eval = self.model((b_x, b_h))
        q_eval = q_eval.gather(1, b_action)
        _, q_next = self.target_model((b_next_x, b_next_h))
        q_target = (b_reward + args.GAMMA * q_next.detach().max(1)[0]).unsqueeze(1)
        loss = self.loss(q_eval, q_target)

        self.optimizier.zero_grad()
        loss.backward(retain_graph=True)
        self.optimizier.step()
        return loss

    def update_target_model(self):
        self.target_model.load_state_dict(self.model.state_dict())


class Evaluate:
    def __init__(self, agent, X, Y):
        self.agent, self.X, self.Y = agent, X, Y

    @staticmethod
    def evaluate_sample(y_pred, y_true):
        inter = [i for i in y_pred if i in y_true]
        union = set(y_pred) | set(y_true)
        recall = len(inter) / max(len(y_true), 1)
        return len(inter) / max(len(union), 1), recall

    @staticmethod
    def evaluate_ddi(y_pred):
        pairs = [[a, b] for i, a in enumerate(y_pred) for b in y_pred[i + 1:]]
        bad = [p for p in pairs if p in ddi_df or p[::-1] in ddi_df]
        return len(bad) / max(len(pairs), 1)

    @torch.no_grad()
    def evaluate(self, init_adj):
        jac, rec, ddr = [], [], []
        for x, y in zip(self.X, self.Y):
            _, g = self.agent.rgcn(init_adj)
            f = self.agent.reset(x)
            h = torch.zeros(1, state_size)
            selected = []
            for _ in range(args.max_step):
                next_h, output = self.agent.model((self.agent.new_state(f, g), h))
                action = int(output.argmax(1))
                if action in selected or action == action_size - 1:
                    break
                _, g = self.agent.step(action, selected, y)
                selected.append(action)
                h = next_h
            j, r = self.evaluate_sample(selected, set(y))
            jac.append(j), rec.append(r), ddr.append(self.evaluate_ddi(selected))
        print('avg_jaccard:{:.3f} avg_recall:{:.3f} avg_ddr:{:.3f}'.format(np.mean(jac), np.mean(rec), np.mean(ddr)))


def train(agent, X, Y, init_adj):
    memory = []
    for epoch in range(args.epochs):
        for x, y in zip(X, Y):
            _, g = agent.rgcn(init_adj)
            f = agent.reset(x)
            h = torch.zeros(1, state_size)
            selectedAction = []
            for step in range(args.max_step):
                x_t = agent.new_state(f, g)
                action, next_h = agent.act(x_t, h, selectedAction)
                reward, g_new = agent.step(action, selectedAction, y)
                done = not torch.is_tensor(g_new)
                next_x = x_t if done else agent.new_state(f, g_new)
                memory.append((x_t.detach(), h.detach(), int(action), reward, next_x.detach(), next_h.detach()))
                if len(memory) > args.BATCH_SIZE:
                    agent.replay(memory, args.BATCH_SIZE)
                if done:
                    break
                selectedAction.append(int(action))
                g, h = g_new, next_h
        print('epoch', epoch, 'memory', len(memory))


def main():
    X, Y = make_records(args.n_patients)
    agent = Agent()
    init_adj = get_torch_matrix(getADJ(0, [], ddi_df) * 0, device)
    train(agent, X[:9], Y[:9], init_adj)
    Evaluate(agent, X[9:], Y[9:]).evaluate(init_adj)


if __name__ == '__main__':
    main()
