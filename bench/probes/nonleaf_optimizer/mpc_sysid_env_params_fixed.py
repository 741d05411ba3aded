# expect: clean
# source: https://github.com/locuslab/differentiable-mpc/issues/5
import argparse

import numpy as np
import torch
from torch import optim
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--env', type=str, default='pendulum', choices=['pendulum', 'pendulum-complex'])
    parser.add_argument('--mode', type=str, default='sysid', choices=['sysid'])
    parser.add_argument('--n_batch', type=int, default=16)
    parser.add_argument('--n_train', type=int, default=64)
    parser.add_argument('--n_epoch', type=int, default=4)
    parser.add_argument('--T', type=int, default=10)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--device', type=str, default='cpu')
    parser.add_argument('--dtype', type=str, default='float64', choices=['float32', 'float64'])
    args = parser.parse_args()

    exp = IL_Exp(**vars(args))
    exp.run()


class PendulumDx:
    def __init__(self, params, dt=0.05, max_torque=2.0):
        self.params = params
        self.dt = dt
        self.max_torque = max_torque
        self.n_state, self.n_ctrl = 3, 1

    def __call__(self, x, u):
        g, m, l = torch.unbind(self.params)
        u = torch.clamp(u, -self.max_torque, self.max_torque)[:, 0]
        cos_th, sin_th, dth = torch.unbind(x, dim=1)
        th = torch.atan2(sin_th, cos_th)
        newdth = dth + self.dt * (-3. * g / (2. * l) * (-sin_th) + 3. * u / (m * l ** 2))
        newth = th + newdth * self.dt
        return torch.stack((torch.cos(newth), torch.sin(newth), newdth), dim=1)


def make_env(n_traj, T, seed, dtype):
    rng = np.random.RandomState(seed)
    true_params = torch.tensor((10., 1., 1.), dtype=dtype)
    true_dx = PendulumDx(true_params)
    th = torch.tensor(rng.uniform(-np.pi, np.pi, n_traj), dtype=dtype)
    dth = torch.tensor(rng.uniform(-1., 1., n_traj), dtype=dtype)
    x = torch.stack((torch.cos(th), torch.sin(th), dth), dim=1)
    us = torch.tensor(rng.uniform(-2., 2., (n_traj, T, 1)), dtype=dtype)
    xs = [x]
    for t in range(T - 1):
        x = true_dx(x, us[:, t])
        xs.append(x)
    return true_dx, torch.stack(xs, dim=1), us


class IL_Exp:
    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)

        torch.manual_seed(self.seed)
        self.dtype = getattr(torch, self.dtype)
        self.true_dx, self.xs, self.us = make_env(self.n_train, self.T, self.seed, self.dtype)
        self.n_state, self.n_ctrl = self.true_dx.n_state, self.true_dx.n_ctrl
        self.learn_dx = self.mode == 'sysid'

        if self.learn_dx:
            if self.env == 'pendulum':
                self.env_params = torch.tensor(
                    (15., 3., 0.5), requires_grad=True)
            elif self.env == 'pendulum-complex':
                self.env_params = torch.tensor((5., 1., 1.)) + \
                    torch.tensor((3., 1., 1.)) * (torch.rand(3) - 0.5)
                self.env_params.requires_grad_()
            else:
                assert False
        else:
            self.env_params = self.true_dx.params
        self.env_params = self.env_params.detach().to(device=self.device, dtype=self.dtype).requires_grad_()

    def make_data(self, shuffle=False):
        xs = self.xs.to(self.device)
        us = self.us.to(self.device)
        ds = TensorDataset(xs, us)
        return DataLoader(ds, batch_size=self.n_batch, shuffle=shuffle)

    def sysid_loss(self, dx, xs, us):
        T = xs.shape[1]
        xs_flat = xs[:, :-1].transpose(0, 2).contiguous().view(self.n_state, -1).t()
        us_flat = us[:, :-1].transpose(0, 2).contiguous().view(self.n_ctrl, -1).t()
        pred_next_x = dx(xs_flat, us_flat).t().view(self.n_state, T - 1, -1).transpose(0, 2)
        next_x = xs[:, 1:]
        assert next_x.shape == pred_next_x.shape
        return (next_x.detach() - pred_next_x).pow(2).mean()

    def run(self):
        torch.manual_seed(self.seed)
        if self.mode == 'sysid':
            params = [{
                'params': self.env_params,
                'lr': 1e-2,
                'alpha': 0.5,
            }]
            opt = optim.RMSprop(params)
        else:
            assert False

        train = self.make_data(shuffle=True)
        n_train_batch = len(train)
        for i in range(self.n_epoch):
            for j, (xs, us) in enumerate(train):
                dx = PendulumDx(self.env_params)
                sysid_loss = self.sysid_loss(dx, xs, us)
                opt.zero_grad()
                sysid_loss.backward()
                opt.step()
            print(','.join(map(str, [i + j / n_train_batch, round(sysid_loss.item(), 6)])))
            print(np.array_str(
                torch.stack((self.env_params, self.true_dx.params)).cpu().detach().numpy(),
                precision=2, suppress_small=True))


if __name__ == "__main__":
    main()
