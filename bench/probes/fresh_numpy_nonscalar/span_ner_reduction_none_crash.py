# expect: nonscalar_backward
# source: https://github.com/z814081807/DeepNER/issues/19
import argparse
import logging
import sys
from types import SimpleNamespace

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, RandomSampler

logging.basicConfig(format='%(asctime)s - %(levelname)s - %(name)s - %(message)s',
                    datefmt='%m/%d/%Y %H:%M:%S', level=logging.INFO, stream=sys.stdout)
logger = logging.getLogger(__name__)


class Args:
    @staticmethod
    def parse():
        parser = argparse.ArgumentParser()
        parser.add_argument('--bert_dir', default='tiny-bert', help='bert dir for uer')
        parser.add_argument('--task_type', default='span', help='crf / span / mrc')
        parser.add_argument('--loss_type', default='ce', help='loss type for span bert')
        parser.add_argument('--max_seq_len', default=24, type=int)
        parser.add_argument('--num_tags', default=5, type=int)
        parser.add_argument('--train_epochs', default=2, type=int)
        parser.add_argument('--train_batch_size', default=8, type=int)
        parser.add_argument('--dropout_prob', default=0.1, type=float)
        parser.add_argument('--lr', default=2e-5, type=float)
        parser.add_argument('--other_lr', default=2e-3, type=float)
        parser.add_argument('--max_grad_norm', default=1.0, type=float)
        parser.add_argument('--warmup_proportion', default=0.1, type=float)
        parser.add_argument('--weight_decay', default=0.00, type=float)
        parser.add_argument('--adam_epsilon', default=1e-8, type=float)
        return parser.parse_args()


class TinyBert(nn.Module):
    """Stand-in for the pretrained BertModel (same call signature, tiny sizes)."""
    def __init__(self, vocab_size=100, hidden_size=32):
        super(TinyBert, self).__init__()
        self.config = SimpleNamespace(hidden_size=hidden_size, layer_norm_eps=1e-12)
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.token_type_embeddings = nn.Embedding(2, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.encoder = nn.TransformerEncoderLayer(hidden_size, 4, 64, dropout=0.1, batch_first=True)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.LayerNorm(self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids))
        return (self.encoder(x, src_key_padding_mask=attention_mask == 0),)


class BaseModel(nn.Module):
    def __init__(self, bert_dir, dropout_prob):
        super(BaseModel, self).__init__()
        self.bert_module = TinyBert()
        self.bert_config = self.bert_module.config

    @staticmethod
    def _init_weights(blocks, **kwargs):
        initializer_range = kwargs.pop('initializer_range', 0.02)
        for block in blocks:
            for module in block.modules():
                if isinstance(module, nn.Linear):
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)
                elif isinstance(module, nn.Embedding):
                    nn.init.normal_(module.weight, mean=0, std=initializer_range)


class SpanModel(BaseModel):
    def __init__(self, bert_dir, num_tags, dropout_prob=0.1, loss_type='ce', **kwargs):
        super(SpanModel, self).__init__(bert_dir, dropout_prob=dropout_prob)
        out_dims = self.bert_config.hidden_size
        mid_linear_dims = kwargs.pop('mid_linear_dims', 128)
        self.num_tags = num_tags
        self.mid_linear = nn.Sequential(
            nn.Linear(out_dims, mid_linear_dims),
            nn.ReLU(),
            nn.Dropout(dropout_prob)
        )
        out_dims = mid_linear_dims
        self.start_fc = nn.Linear(out_dims, num_tags)
        self.end_fc = nn.Linear(out_dims, num_tags)

        reduction = 'none'
        if loss_type == 'ce':
            self.criterion = nn.CrossEntropyLoss(reduction=reduction)
        else:
            self.criterion = nn.CrossEntropyLoss(reduction=reduction, label_smoothing=0.1)

        init_blocks = [self.mid_linear, self.start_fc, self.end_fc]
        self._init_weights(init_blocks)

    def forward(self, token_ids, attention_masks, token_type_ids, start_ids=None, end_ids=None):
        bert_outputs = self.bert_module(
            input_ids=token_ids,
            attention_mask=attention_masks,
            token_type_ids=token_type_ids
        )
        seq_out = bert_outputs[0]
        seq_out = self.mid_linear(seq_out)
        start_logits = self.start_fc(seq_out)
        end_logits = self.end_fc(seq_out)
        out = (start_logits, end_logits, )

        if start_ids is not None and end_ids is not None and self.training:
            start_logits = start_logits.view(-1, self.num_tags)
            end_logits = end_logits.view(-1, self.num_tags)

            active_loss = attention_masks.view(-1) == 1
            active_start_logits = start_logits[active_loss]
            active_end_logits = end_logits[active_loss]
            active_start_labels = start_ids.view(-1)[active_loss]
            active_end_labels = end_ids.view(-1)[active_loss]

            start_loss = self.criterion(active_start_logits, active_start_labels)
            end_loss = self.criterion(active_end_logits, active_end_labels)
            loss = start_loss + end_loss
            out = (loss, ) + out
        return out


class NERDataset(Dataset):
    def __init__(self, num_examples, max_seq_len, num_tags, seed=123):
        g = torch.Generator().manual_seed(seed)
        lengths = torch.randint(max_seq_len // 2, max_seq_len + 1, (num_examples,), generator=g)
        self.token_ids = torch.randint(1, 100, (num_examples, max_seq_len), generator=g)
        self.attention_masks = (torch.arange(max_seq_len)[None, :] < lengths[:, None]).long()
        self.token_ids = self.token_ids * self.attention_masks
        self.token_type_ids = torch.zeros_like(self.token_ids)
        self.start_ids = torch.randint(0, num_tags, (num_examples, max_seq_len), generator=g) * self.attention_masks
        self.end_ids = torch.randint(0, num_tags, (num_examples, max_seq_len), generator=g) * self.attention_masks

    def __len__(self):
        return self.token_ids.shape[0]

    def __getitem__(self, index):
        return {'token_ids': self.token_ids[index], 'attention_masks': self.attention_masks[index],
                'token_type_ids': self.token_type_ids[index], 'start_ids': self.start_ids[index],
                'end_ids': self.end_ids[index]}


def build_optimizer_and_scheduler(opt, model, t_total):
    no_decay = ["bias", "LayerNorm.weight"]
    bert_param_optimizer, other_param_optimizer = [], []
    for name, para in model.named_parameters():
        if name.split('.')[0] == 'bert_module':
            bert_param_optimizer.append((name, para))
        else:
            other_param_optimizer.append((name, para))
    optimizer_grouped_parameters = [
        {"params": [p for n, p in bert_param_optimizer if not any(nd in n for nd in no_decay)],
         "weight_decay": opt.weight_decay, 'lr': opt.lr},
        {"params": [p for n, p in bert_param_optimizer if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0, 'lr': opt.lr},
        {"params": [p for n, p in other_param_optimizer if not any(nd in n for nd in no_decay)],
         "weight_decay": opt.weight_decay, 'lr': opt.other_lr},
        {"params": [p for n, p in other_param_optimizer if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0, 'lr': opt.other_lr},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=opt.lr, eps=opt.adam_epsilon)
    warmup = int(opt.warmup_proportion * t_total)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: step / max(1, warmup) if step < warmup else max(0.0, (t_total - step) / max(1, t_total - warmup)))
    return optimizer, scheduler


def train(opt, model, train_dataset):
    train_loader = DataLoader(dataset=train_dataset, batch_size=opt.train_batch_size,
                              sampler=RandomSampler(train_dataset), num_workers=0)
    t_total = len(train_loader) * opt.train_epochs
    optimizer, scheduler = build_optimizer_and_scheduler(opt, model, t_total)
    logger.info("***** Running training *****")
    logger.info(f"  Num Examples = {len(train_dataset)}")
    logger.info(f"  Total optimization steps = {t_total}")
    global_step, avg_loss, log_loss_steps = 0, 0., 2
    model.zero_grad()
    for epoch in range(opt.train_epochs):
        for step, batch_data in enumerate(train_loader):
            model.train()
            loss = model(**batch_data)[0]
            loss.backward()  # raises
            torch.nn.utils.clip_grad_norm_(model.parameters(), opt.max_grad_norm)
            optimizer.step()
            scheduler.step()
            model.zero_grad()
            global_step += 1
            avg_loss += loss.item()
            if global_step % log_loss_steps == 0:
                logger.info('Step: %d / %d ----> total loss: %.5f' % (global_step, t_total, avg_loss / log_loss_steps))
                avg_loss = 0.
    logger.info('Train done')


if __name__ == '__main__':
    opt = Args.parse()
    torch.manual_seed(123)
    model = SpanModel(bert_dir=opt.bert_dir, num_tags=opt.num_tags,
                      dropout_prob=opt.dropout_prob, loss_type=opt.loss_type)
    train_dataset = NERDataset(32, opt.max_seq_len, opt.num_tags)
    train(opt, model, train_dataset)
