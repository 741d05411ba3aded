# expect: clean
# source: https://github.com/marrlab/DomainLab/commit/6701cbf3a8108a309bc655de9bb31a85b55dec79
"""Domain generalization with DomainLab-style trainer chains (condensed).

Trainers can decorate other trainers: here the feedback-optimization trainer (fbopt/mhof)
wraps an IRM trainer, which wraps an ERM model.  Before training, fbopt probes the
regularization losses of its decoratee on the whole training set to set the controller
setpoint, then adjusts the regularization multiplier once per epoch.  Three synthetic
"PACS-like" source domains and one held-out target domain.
"""
from operator import add
from types import SimpleNamespace

import torch
from torch import autograd, nn, optim
from torch.nn import functional as F

torch.manual_seed(0)


# ------------------------------------------------------------------ tasks / models
class TaskDsetDomains:
    def __init__(self, n_per_domain=32, batch_size=8):
        self.list_domain_tr = ["photo", "art", "cartoon"]
        self.dict_dset_tr, self.dict_loader_tr = {}, {}
        proto = torch.randn(4, 3, 8, 8)
        for k, name in enumerate(self.list_domain_tr + ["sketch"]):
            y = torch.randint(0, 4, (n_per_domain,))
            style = 0.5 * k * torch.randn(1, 3, 1, 1)
            x = proto[y] + style + 0.3 * torch.randn(n_per_domain, 3, 8, 8)
            d = torch.full((n_per_domain,), k)
            batches = list(zip(x.split(batch_size), y.split(batch_size), d.split(batch_size)))
            if name == "sketch":
                self.loader_te = batches
            else:
                self.dict_dset_tr[name], self.dict_loader_tr[name] = (x, y), batches
        self.loader_tr = [b for name in self.list_domain_tr for b in self.dict_loader_tr[name]]
        self._loader_tr_no_drop = self.loader_tr


class ModelERM(nn.Module):
    def __init__(self, net_classifier):
        super().__init__()
        self.net_classifier = net_classifier
        self.dict_multiplier = {}
        self.list_d_tr = None

    def cal_logit_y(self, tensor_x):
        return self.net_classifier(tensor_x)

    def cal_task_loss(self, tensor_x, tensor_y):
        return F.cross_entropy(self.cal_logit_y(tensor_x), tensor_y, reduction="none")

    def cal_reg_loss(self, tensor_x, tensor_y, tensor_d, others=None):
        return [], []

    def cal_loss(self, tensor_x, tensor_y, tensor_d, others=None):
        list_reg, list_mu = self.cal_reg_loss(tensor_x, tensor_y, tensor_d, others)
        loss = self.cal_task_loss(tensor_x, tensor_y)
        for reg, mu in zip(list_reg, list_mu):
            loss = loss + mu * reg
        return loss, list_reg

    @property
    def list_str_multiplier_na(self):
        return list(self.dict_multiplier.keys())

    def hyper_init(self, functor_scheduler, trainer=None):
        return functor_scheduler(trainer=trainer, **self.dict_multiplier)

    def hyper_update(self, epoch, fun_scheduler):
        self.dict_multiplier.update(fun_scheduler(epoch))


# ------------------------------------------------------------------ algos/trainers
class AbstractTrainer:
    def __init__(self, extend=None):
        self._model = None
        self._decoratee = extend  # decoratee can be both model or trainer
        self.aconf = self.observer = self.optimizer = None
        self.epo_loss_tr = self.epo_reg_loss_tr = self.epo_task_loss_tr = None

    @property
    def model(self):
        return self.get_model()

    @model.setter
    def model(self, model):
        self._model = model

    @property
    def decoratee(self):
        if self._decoratee is None:
            return self.model
        return self._decoratee

    def get_model(self):
        """recursively get the "real" model from trainer"""
        if "trainer" not in str(type(self._model)).lower():
            return self._model
        return self._model.get_model()

    def init_business(self, model, task, observer, device, aconf):
        if self._decoratee is not None:
            self._decoratee.init_business(model, task, observer, device, aconf)
            self.model = self._decoratee
        else:
            self.model = model
        self.task, self.observer, self.device, self.aconf = task, observer, device, aconf
        self.model.list_d_tr = task.list_domain_tr
        self.dict_loader_tr, self.loader_tr = task.dict_loader_tr, task.loader_tr
        self.loader_tr_no_drop, self.loader_te = task._loader_tr_no_drop, task.loader_te
        self.num_batches = len(self.loader_tr)
        self.flag_update_hyper_per_batch = False
        self.optimizer = optim.Adam(self.model.parameters(), lr=aconf.lr)

    def before_batch(self, epoch, ind_batch):
        return

    def after_batch(self, epoch, ind_batch):
        return

    def cal_reg_loss(self, tensor_x, tensor_y, tensor_d, others=None):
        """combine losses of current trainer with self._model.cal_reg_loss (trainer or model)"""
        list_reg_loss_model_tensor, list_mu_model = self.decoratee.cal_reg_loss(tensor_x, tensor_y, tensor_d, others)
        list_reg_loss_trainer_tensor, list_mu_trainer = self._cal_reg_loss(tensor_x, tensor_y, tensor_d, others)
        return list_reg_loss_model_tensor + list_reg_loss_trainer_tensor, list_mu_model + list_mu_trainer

    def _cal_reg_loss(self, tensor_x, tensor_y, tensor_d, others=None):
        return [], []


class TrainerBasic(AbstractTrainer):
    def cal_loss(self, tensor_x, tensor_y, tensor_d, others):
        loss_task = self.model.cal_task_loss(tensor_x, tensor_y)
        list_reg_tr, list_mu_tr = self.cal_reg_loss(tensor_x, tensor_y, tensor_d, others)
        reg = sum(mu * r.sum() for r, mu in zip(list_reg_tr, list_mu_tr)) if list_reg_tr else 0.0
        return loss_task.sum() + reg

    def tr_epoch(self, epoch, flag_info=False):
        self.model.train()
        self.epo_loss_tr = 0
        for ind_batch, (tensor_x, tensor_y, tensor_d, *others) in enumerate(self.loader_tr):
            self.before_batch(epoch, ind_batch)
            self.optimizer.zero_grad()
            loss = self.cal_loss(tensor_x, tensor_y, tensor_d, others)
            loss.backward()
            self.optimizer.step()
            self.epo_loss_tr += loss.detach().item()
            self.after_batch(epoch, ind_batch)
        return self.observer.update(epoch, flag_info)


class TrainerIRM(TrainerBasic):
    """IRMv1: unbiased estimate of the squared gradient norm w.r.t. a dummy classifier scale."""

    def tr_epoch(self, epoch, flag_info=False):
        self.model.train()
        self.epo_loss_tr = 0
        for ind_batch, tuple_data_domains_batch in enumerate(zip(*self.dict_loader_tr.values())):
            self.optimizer.zero_grad()
            list_domain_loss_erm, list_domain_reg = [], []
            for tensor_x, tensor_y, tensor_d, *others in tuple_data_domains_batch:
                list_domain_loss_erm.append(self.model.cal_task_loss(tensor_x, tensor_y).mean())
                list_1ele_loss_irm, _ = self._cal_reg_loss(tensor_x, tensor_y, tensor_d, others)
                list_domain_reg += list_1ele_loss_irm
            loss = torch.sum(torch.stack(list_domain_loss_erm)) + \
                self.aconf.gamma_reg * torch.sum(torch.stack([r.mean() for r in list_domain_reg]))
            loss.backward()
            self.optimizer.step()
            self.epo_loss_tr += loss.detach().item()
            self.after_batch(epoch, ind_batch)
        return self.observer.update(epoch, flag_info)

    def _cal_phi(self, tensor_x):
        return self.model.cal_logit_y(tensor_x)

    def _cal_reg_loss(self, tensor_x, tensor_y, tensor_d, others=None):
        """Let trainer behave like a model, so that other trainer could use it"""
        y = tensor_y
        with torch.enable_grad():
            phi = self._cal_phi(tensor_x)
            dummy_w_scale = torch.tensor(1.).to(tensor_x.device).requires_grad_()
            loss_1 = F.cross_entropy(phi[::2] * dummy_w_scale, y[::2])
            loss_2 = F.cross_entropy(phi[1::2] * dummy_w_scale, y[1::2])
            grad_1 = autograd.grad(loss_1, [dummy_w_scale], create_graph=True)[0]
            grad_2 = autograd.grad(loss_2, [dummy_w_scale], create_graph=True)[0]
            loss_irm_scalar = torch.sum(grad_1 * grad_2)  # scalar
            loss_irm_tensor = loss_irm_scalar.expand(tensor_x.shape[0])
            return [loss_irm_tensor], [self.aconf.gamma_reg]


class HyperSchedulerFeedback:
    """PI-style controller on the regularization multipliers (fbopt_mu_controller, simplified)."""

    def __init__(self, trainer, **kwargs):
        self.trainer, self.mmu = trainer, dict(kwargs)
        self.setpoint4R, self.setpoint4ell, self.k_i_gain = None, None, None

    def set_setpoint(self, list_setpoint4r, setpoint4ell):
        self.setpoint4R, self.setpoint4ell = list_setpoint4r, setpoint4ell

    def set_k_i_gain(self, epo_reg_loss):
        self.k_i_gain = [self.trainer.aconf.k_i_gain / max(abs(r), 1e-6) for r in epo_reg_loss]

    def search_mu(self, epo_reg_loss, epo_task_loss, epo_loss, list_str_multiplier_na, miter):
        delta = [r - s for r, s in zip(epo_reg_loss, self.setpoint4R)]
        for na, gain, dlt in zip(list_str_multiplier_na, self.k_i_gain, delta):
            self.mmu[na] = max(1e-6, self.mmu[na] * (1.0 + gain * dlt))

    def update_setpoint(self, epo_reg_loss, epo_task_loss):
        if all(r < s for r, s in zip(epo_reg_loss, self.setpoint4R)):
            self.setpoint4R = [0.9 * r for r in epo_reg_loss]
            return True
        return False


class TrainerFbOpt(TrainerBasic):
    def set_scheduler(self, scheduler):
        self.hyper_scheduler = self.model.hyper_init(scheduler, trainer=self)

    def eval_r_loss(self):
        """evaluate the regularization loss and ERM loss with respect ot parameter dict_theta"""
        self.model.eval()
        epo_reg_loss, epo_task_loss, epo_p_loss, counter = [], 0, 0, 0.0
        with torch.no_grad():
            for _, (tensor_x, vec_y, vec_d, *others) in enumerate(self.loader_tr_no_drop):
                tuple_reg_loss = self.decoratee.cal_reg_loss(tensor_x, vec_y, vec_d, others)
                p_loss, *_ = self.model.cal_loss(tensor_x, vec_y, vec_d, others)
                list_b_reg_loss_sumed = [ele.sum().detach().item() for ele in tuple_reg_loss[0]]
                epo_reg_loss = list_b_reg_loss_sumed if len(epo_reg_loss) == 0 else \
                    list(map(add, epo_reg_loss, list_b_reg_loss_sumed))
                epo_task_loss += self.model.cal_task_loss(tensor_x, vec_y).sum().detach().item()
                epo_p_loss += p_loss.sum().detach().item()
                counter += 1.0
        return [ele / counter for ele in epo_reg_loss], epo_task_loss / counter, epo_p_loss / counter

    def before_tr(self):
        self.flag_setpoint_updated = False
        self.set_scheduler(scheduler=HyperSchedulerFeedback)
        self.set_model_with_mu()
        self.epo_reg_loss_tr, self.epo_task_loss_tr, self.epo_loss_tr = self.eval_r_loss()
        self.hyper_scheduler.set_setpoint(
            [ele * self.aconf.ini_setpoint_ratio for ele in self.epo_reg_loss_tr], self.epo_task_loss_tr)
        self.hyper_scheduler.set_k_i_gain(self.epo_reg_loss_tr)

    def set_model_with_mu(self):
        self.model.hyper_update(epoch=None, fun_scheduler=lambda epoch: self.hyper_scheduler.mmu)
        self.aconf.gamma_reg = self.hyper_scheduler.mmu["gamma_reg"]

    def tr_epoch(self, epoch, flag_info=False):
        self.hyper_scheduler.search_mu(self.epo_reg_loss_tr, self.epo_task_loss_tr, self.epo_loss_tr,
                                       self.model.list_str_multiplier_na, miter=epoch)
        self.set_model_with_mu()
        flag = self._decoratee.tr_epoch(epoch, self.flag_setpoint_updated)
        self.epo_reg_loss_tr, self.epo_task_loss_tr, self.epo_loss_tr = self.eval_r_loss()
        self.flag_setpoint_updated = self.hyper_scheduler.update_setpoint(self.epo_reg_loss_tr, self.epo_task_loss_tr)
        return flag


class ObVisitor:
    def __init__(self, trainer):
        self.trainer = trainer

    def update(self, epoch, flag_info=False):
        model = self.trainer.model
        model.eval()
        with torch.no_grad():
            correct = sum((model.cal_logit_y(x).argmax(1) == y).sum().item() for x, y, _ in self.trainer.loader_te)
        total = sum(len(y) for _, y, _ in self.trainer.loader_te)
        print(f"epoch {epoch}: loss_tr={self.trainer.epo_loss_tr:.3f} acc_te={correct / total:.3f}")
        return False


if __name__ == "__main__":
    aconf = SimpleNamespace(lr=1e-3, gamma_reg=0.1, ini_setpoint_ratio=0.99, k_i_gain=0.001, epos=2)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                        nn.Linear(32, 4))
    model = ModelERM(net)
    model.dict_multiplier = {"gamma_reg": aconf.gamma_reg}
    task = TaskDsetDomains()
    trainer_irm = TrainerIRM()
    trainer = TrainerFbOpt(extend=trainer_irm)
    observer = ObVisitor(trainer_irm)
    trainer.init_business(model, task, observer, torch.device("cpu"), aconf)
    trainer.before_tr()
    for epoch in range(aconf.epos):
        trainer.tr_epoch(epoch)
