# expect: clean
# source: https://github.com/xiangking/ark-nlp/issues/46
"""Text classification with PGD adversarial training on the word embeddings,
written against ark-nlp's Task API: SequenceClassificationTask.fit drives
_get_module_inputs_on_train -> module forward -> _get_train_loss ->
_on_backward -> _on_optimize -> _on_step_end, and the user subclasses the
task to put PGD (ark_nlp/factory/utils/attack.py) into ``_on_backward``.
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)


# ------------------------------------------------------------ ark_nlp/factory/utils/attack.py
class PGD(object):
    def __init__(self, module):
        self.module = module
        self.emb_backup = {}
        self.grad_backup = {}

    def attack(self, epsilon=1., alpha=0.3, emb_name='word_embeddings', is_first_attack=False):
        # emb_name这个参数要换成你模型中embedding的参数名
        for name, param in self.module.named_parameters():
            if param.requires_grad and emb_name in name:
                if is_first_attack:
                    self.emb_backup[name] = param.data.clone()
                norm = torch.norm(param.grad)
                if norm != 0 and not torch.isnan(norm):
                    r_at = alpha * param.grad / norm
                    param.data.add_(r_at)
                    param.data = self.project(name, param.data, epsilon)

    def restore(self, emb_name='word_embeddings'):
        for name, param in self.module.named_parameters():
            if param.requires_grad and emb_name in name:
                assert name in self.emb_backup
                param.data = self.emb_backup[name]
        self.emb_backup = {}

    def project(self, param_name, param_data, epsilon):
        r = param_data - self.emb_backup[param_name]
        if torch.norm(r) > epsilon:
            r = epsilon * r / torch.norm(r)
        return self.emb_backup[param_name] + r

    def backup_grad(self):
        for name, param in self.module.named_parameters():
            if param.requires_grad and param.grad is not None:
                self.grad_backup[name] = param.grad.clone()

    def restore_grad(self):
        for name, param in self.module.named_parameters():
            if param.requires_grad and param.grad is not None:
                param.grad = self.grad_backup[name]


# ------------------------------------------------------------ a small Bert for sequence classification
class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_len):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_len, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.size(1))[None]
        return self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(pos))


class Bert(nn.Module):
    def __init__(self, vocab_size=100, hidden_size=32, max_len=16, num_labels=3):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab_size, hidden_size, max_len)
        layer = nn.TransformerEncoderLayer(hidden_size, 4, hidden_size * 2, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1)
        self.pooler = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, input_ids, attention_mask, token_type_ids=None, **kwargs):
        x = self.embeddings(input_ids)
        x = self.encoder(x, src_key_padding_mask=attention_mask == 0)
        return self.classifier(self.pooler(x[:, 0]))


class TCDataset(Dataset):
    to_device_cols = ['input_ids', 'attention_mask', 'token_type_ids', 'label_ids']

    def __init__(self, n=24, max_len=16, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(1, 100, (n, max_len), generator=g)
        self.label_ids = self.input_ids[:, 1] % 3

    def __len__(self):
        return len(self.label_ids)

    def __getitem__(self, i):
        return dict(input_ids=self.input_ids[i], attention_mask=torch.ones_like(self.input_ids[i]),
                    token_type_ids=torch.zeros_like(self.input_ids[i]), label_ids=self.label_ids[i])


# ------------------------------------------------------------ ark_nlp/factory/task/base/_sequence_classification.py
class SequenceClassificationTask(object):
    def __init__(self, module, optimizer, loss_function, scheduler=None, n_gpu=1, device='cpu',
                 ema_decay=None):
        self.module = module
        self.optimizer = optimizer
        self.loss_function = loss_function
        self.scheduler = scheduler
        self.n_gpu = n_gpu
        self.device = torch.device(device)
        self.ema_decay = ema_decay

    def fit(self, train_data, validation_data=None, batch_size=32, epochs=1,
            gradient_accumulation_steps=1, **kwargs):
        self.logs = dict()
        train_generator = self._on_train_begin(train_data, batch_size, shuffle=True, **kwargs)
        for epoch in range(epochs):
            self._on_epoch_begin(**kwargs)
            for step, inputs in enumerate(train_generator):
                # input处理和设备转移
                inputs = self._get_module_inputs_on_train(inputs, **kwargs)
                # forward
                outputs = self.module(**inputs)
                # 计算损失
                logits, loss = self._get_train_loss(inputs, outputs, **kwargs)
                # loss backword
                loss = self._on_backward(inputs, outputs, logits, loss, **kwargs)
                if (step + 1) % gradient_accumulation_steps == 0:
                    self._on_optimize(inputs, outputs, logits, loss, **kwargs)
                self._on_step_end(step, inputs, outputs, loss, **kwargs)
            self._on_epoch_end(epoch, **kwargs)
            if validation_data is not None:
                self.evaluate(validation_data, **kwargs)

    def _on_train_begin(self, train_data, batch_size, shuffle, **kwargs):
        self.train_to_device_cols = train_data.to_device_cols
        train_generator = DataLoader(train_data, batch_size=batch_size, shuffle=shuffle)
        self.train_generator_lenth = len(train_generator)
        self.module.train()
        self.logs['global_step'] = 0
        self.logs['global_loss'] = 0
        return train_generator

    def _on_epoch_begin(self, **kwargs):
        self.module.train()
        self.logs['epoch_loss'] = 0
        self.logs['epoch_step'] = 0

    def _get_module_inputs_on_train(self, inputs, **kwargs):
        for col in self.train_to_device_cols:
            inputs[col] = inputs[col].to(self.device)
        return inputs

    def _get_train_loss(self, inputs, outputs, **kwargs):
        if type(outputs) == tuple:
            logits, loss = outputs[:2]
        else:
            logits = outputs
            # 计算损失
            loss = self._compute_loss(inputs, logits, **kwargs)
        return logits, loss

    def _compute_loss(self, inputs, logits, verbose=True, **kwargs):
        return self.loss_function(logits, inputs['label_ids'])

    def _on_backward(self, inputs, outputs, logits, loss, gradient_accumulation_steps=1, **kwargs):
        if self.n_gpu > 1:
            loss = loss.mean()
        if gradient_accumulation_steps > 1:
            loss = loss / gradient_accumulation_steps
        loss.backward()
        self._on_backward_record(loss, **kwargs)
        return loss

    def _on_backward_record(self, loss, **kwargs):
        self.logs['global_loss'] += loss.item()
        self.logs['epoch_loss'] += loss.item()

    def _on_optimize(self, inputs, outputs, logits, loss, grad_clip=None, **kwargs):
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), grad_clip)
        self.optimizer.step()
        if self.scheduler:
            self.scheduler.step()
        self.optimizer.zero_grad()
        self.logs['global_step'] += 1
        self.logs['epoch_step'] += 1

    def _on_step_end(self, step, inputs, outputs, loss, verbose=True, show_step=2, **kwargs):
        if verbose and (step + 1) % show_step == 0:
            print('[{}/{}],train loss is:{:.6f}'.format(
                step, self.train_generator_lenth, self.logs['epoch_loss'] / self.logs['epoch_step']))

    def _on_epoch_end(self, epoch, verbose=True, **kwargs):
        if verbose:
            print('epoch:[{}],train loss is:{:.6f} \n'.format(
                epoch, self.logs['epoch_loss'] / self.logs['epoch_step']))

    def evaluate(self, validation_data, evaluate_batch_size=16, **kwargs):
        self.module.eval()
        loss_sum, steps, correct, n = 0.0, 0, 0, 0
        with torch.no_grad():
            for inputs in DataLoader(validation_data, batch_size=evaluate_batch_size):
                outputs = self.module(**inputs)
                logits, loss = self._get_train_loss(inputs, outputs)
                loss_sum, steps = loss_sum + loss.item(), steps + 1
                correct += (logits.argmax(-1) == inputs['label_ids']).sum().item()
                n += len(inputs['label_ids'])
        print('test loss is:{:.6f}, acc: {:.3f}'.format(loss_sum / steps, correct / n))


# ------------------------------------------------------------ user code: PGD in _on_backward
class AttackTask(SequenceClassificationTask):
    def __init__(self, *args, **kwargs):
        super(AttackTask, self).__init__(*args, **kwargs)
        self.pgd = PGD(self.module)
        self.K = 3

    def _on_backward(self, inputs, outputs, logits, loss, gradient_accumulation_steps=1, **kwargs):
        # 如果GPU数量大于1
        if self.n_gpu > 1:
            loss = loss.mean()
        # 如果使用了梯度累积，除以累积的轮数
        if gradient_accumulation_steps > 1:
            loss = loss / gradient_accumulation_steps

        loss.backward()
        self.pgd.backup_grad()
        # 对抗训练
        for t in range(self.K):
            self.pgd.attack(is_first_attack=(t == 0))  # 在embedding上添加对抗扰动, first attack时备份param.data
            if t != self.K - 1:
                self.module.zero_grad()
            else:
                self.pgd.restore_grad()
            outputs = self.module(**inputs)
            logits, loss_adv = self._get_train_loss(inputs, outputs, **kwargs)
            # 如果GPU数量大于1
            if self.n_gpu > 1:
                loss_adv = loss_adv.mean()
            # 如果使用了梯度累积，除以累积的轮数
            if gradient_accumulation_steps > 1:
                loss_adv = loss_adv / gradient_accumulation_steps
            loss_adv.backward()
        self.pgd.restore()  # 恢复embedding参数

        self._on_backward_record(loss, **kwargs)

        return loss


module = Bert()
optimizer = torch.optim.AdamW(module.parameters(), lr=2e-4)
model = AttackTask(module, optimizer, nn.CrossEntropyLoss())
model.fit(TCDataset(seed=0), TCDataset(n=8, seed=1), batch_size=8, epochs=2)
