# expect: grad_unused
# source: https://github.com/huggingface/transformers/issues/8937
# Token-wise gradient of the output of BERT layer j w.r.t. the output of layer i.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)


class TinyBert(nn.Module):
    def __init__(self, vocab=100, hidden=32, layers=4, heads=4):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden)
        self.layer = nn.ModuleList(
            nn.TransformerEncoderLayer(hidden, heads, 64, dropout=0.0, batch_first=True)
            for _ in range(layers))
        self.pooler = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())

    def forward(self, input_ids, attention_mask):
        h = self.embeddings(input_ids)
        hidden_states = (h,)
        for layer in self.layer:
            h = layer(h, src_key_padding_mask=attention_mask == 0)
            hidden_states = hidden_states + (h,)
        return h, self.pooler(h[:, 0]), hidden_states


class SentenceDataset(Dataset):
    def __init__(self, n=4, seq_len=12):
        self.ids = torch.randint(1, 100, (n, 1, seq_len))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, idx):
        return {"input_ids": self.ids[idx], "attention_mask": torch.ones_like(self.ids[idx])}


bert_model = TinyBert().eval()
data_loader = DataLoader(SentenceDataset(), batch_size=1)
i, j = 1, 3

for count, data in enumerate(iter(data_loader)):
    input_ids = torch.squeeze(data['input_ids'], dim=0)
    attention_mask = torch.squeeze(data['attention_mask'], dim=0)
    last_hidden_state, pooled_output, hidden_states = bert_model(input_ids=input_ids, attention_mask=attention_mask)

    bert_layer_i_output = hidden_states[i][0]
    print(bert_layer_i_output.shape)
    bert_layer_j_output = hidden_states[j][0]

    for k in range(bert_layer_i_output.shape[0]):
        gradient = torch.autograd.grad(bert_layer_j_output[k], bert_layer_i_output[k],  # raises
                                       grad_outputs=torch.ones_like(bert_layer_j_output[k]))[0]
        print(gradient.shape)
        print(torch.norm(gradient))
        break
    break
